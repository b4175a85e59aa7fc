#include "shard/block_inputs.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>

#include "vkattn/errors.hpp"

namespace vkattn::detail {

std::vector<std::int64_t> for_each_part_row(const std::vector<std::int64_t>& shape, const std::array<Extent, 4>& box,
                                            const std::function<void(std::int64_t first, std::int64_t count)>& row) {
    const std::size_t rank = shape.size();
    std::array<std::int64_t, 4> full{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), full.begin() + static_cast<std::ptrdiff_t>(4 - rank));
    std::array<Extent, 4> cut;
    for (std::size_t d = 0; d < 4; ++d) cut[d] = full[d] == 1 ? Extent{0, 1} : box[d];
    std::vector<std::int64_t> part_shape(rank);
    for (std::size_t d = 0; d < rank; ++d) part_shape[d] = cut[4 - rank + d].length;
    for (std::int64_t b = cut[0].begin; b < cut[0].begin + cut[0].length; ++b)
        for (std::int64_t h = cut[1].begin; h < cut[1].begin + cut[1].length; ++h)
            for (std::int64_t i = cut[2].begin; i < cut[2].begin + cut[2].length; ++i)
                row(((b * full[1] + h) * full[2] + i) * full[3] + cut[3].begin, cut[3].length);
    return part_shape;
}

namespace {

template <class T>
std::vector<T> mask_part(const MaskView& mask, const std::array<Extent, 4>& box, std::vector<std::int64_t>& shape) {
    const T* data = static_cast<const T*>(mask.data);
    std::vector<T> out;
    shape = for_each_part_row(mask.shape, box, [&](std::int64_t first, std::int64_t count) {
        out.insert(out.end(), data + first, data + first + count);
    });
    return out;
}

template <class T>
std::vector<T> part(const std::vector<T>& values, Extent e) {
    return {values.begin() + e.begin, values.begin() + e.begin + e.length};
}

}  // namespace

BlockInputs::BlockInputs(const Problem& whole, const AttentionInputs& in, const AttentionOptions& whole_options,
                         const BlockBox& box)
    : options(whole_options), heads{box.kv_heads.begin * whole.group, box.kv_heads.length * whole.group} {
    inputs.q = narrowed(in.q, box.batches, heads, box.queries);
    inputs.k = narrowed(in.k, box.batches, box.kv_heads, box.keys);
    inputs.v = narrowed(in.v, box.batches, box.kv_heads, box.keys);
    if (!in.kv_lengths.empty())
        inputs.kv_lengths = in.kv_lengths.subspan(static_cast<std::size_t>(box.batches.begin),
                                                  static_cast<std::size_t>(box.batches.length));
    const std::array<Extent, 4> scores{box.batches, heads, box.queries, box.keys};
    if (in.bool_mask) {
        bool_mask_ = mask_part<std::uint8_t>(*in.bool_mask, scores, bool_shape_);
        inputs.bool_mask = MaskView{bool_mask_.data(), bool_shape_};
    }
    if (in.float_mask) {
        float_mask_ = mask_part<float>(*in.float_mask, scores, float_shape_);
        inputs.float_mask = MaskView{float_mask_.data(), float_shape_};
    }
    // The whole's slopes (given, or from alibi_max_bias), sinks and per-head fp8 scales, narrowed.
    if (!whole.alibi.empty()) inputs.alibi_slopes = slopes_ = part(whole.alibi, heads);
    options.alibi_max_bias.reset();
    if (!whole.sinks.empty()) inputs.sinks = sinks_ = part(whole.sinks, heads);
    auto scales = [&](std::span<const float> given, std::vector<float>& storage) -> std::span<const float> {
        if (given.size() <= 1) return given;  // one scale for the whole tensor
        storage = part(std::vector<float>(given.begin(), given.end()), box.kv_heads);
        return storage;
    };
    inputs.k_scale = scales(in.k_scale, k_scale_);
    inputs.v_scale = scales(in.v_scale, v_scale_);
    // The whole may itself be a block of something larger: origins add up.
    const Block& w = whole_options.block;
    options.block = {.batch = w.batch + box.batches.begin,
                     .head = w.head + heads.begin,
                     .query = w.query + box.queries.begin,
                     .key = w.key + box.keys.begin,
                     .queries = w.queries ? w.queries : w.query + whole.Nq,
                     .keys = w.keys ? w.keys : w.key + whole.Nkv};
}

AttentionOutputs block_outputs(const Problem& whole, const AttentionOutputs& out, const BlockBox& box) {
    const std::int64_t g = whole.group;
    const Extent heads{box.kv_heads.begin * g, box.kv_heads.length * g};
    AttentionOutputs o;
    o.o = narrowed(out.o, box.batches, heads, box.queries);
    const bool dense_run = box.queries.begin == 0 && box.queries.length == whole.Nq && box.keys.begin == 0 &&
                           box.keys.length == whole.Nkv && (box.batches.length == 1 || heads.length == whole.Hq);
    if ((out.weights || out.lse || out.logits) && !dense_run)
        throw Error("internal: a block's dense outputs must be one contiguous run of rows.");
    const std::int64_t first_row = (box.batches.begin * whole.Hq + heads.begin) * whole.Nq;
    if (out.weights) o.weights = out.weights + first_row * whole.Nkv;
    if (out.logits) o.logits = out.logits + first_row * whole.Nkv;
    if (out.lse) o.lse = out.lse + first_row;
    return o;
}

}  // namespace vkattn::detail

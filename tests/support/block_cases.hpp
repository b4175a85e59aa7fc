// The blocks tests' wholes (tests/gpu/test_blocks.cpp, test_blocks_backward.cpp): a whole call's
// shape and features, its random inputs for a seed, the parts of its views and masks a block takes,
// and every feature a block must keep the whole's meaning of.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::block_test {

using namespace vkattn::testing;

struct Range {
    std::int64_t begin, length;
};

// Part of a host view: its batches, heads and rows (no copy).
inline TensorView part(const TensorView& t, Range b, Range h, Range n) {
    TensorView v = t;
    v.data = static_cast<const char*>(t.data) +
             static_cast<std::ptrdiff_t>(size_of(t.dtype)) *
                 (b.begin * t.strides[0] + h.begin * t.strides[1] + n.begin * t.strides[2]);
    v.shape = {b.length, h.length, n.length, t.shape[3]};
    return v;
}

// Calls `at(whole index)` for each element of a mask broadcastable to [B, Hq, Nq, Nkv] inside
// `box`, C-contiguous over the part's shape (its broadcast dimensions stay 1), which it returns.
template <class At>
std::vector<std::int64_t> for_each_in_part(const std::vector<std::int64_t>& shape, const std::array<Range, 4>& box, At at) {
    std::array<std::int64_t, 4> full{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), full.begin() + static_cast<std::ptrdiff_t>(4 - shape.size()));
    std::array<Range, 4> cut;
    for (int d = 0; d < 4; ++d) cut[d] = full[d] == 1 ? Range{0, 1} : box[d];
    std::vector<std::int64_t> part_shape;
    for (int d = 4 - static_cast<int>(shape.size()); d < 4; ++d) part_shape.push_back(cut[d].length);
    for (std::int64_t b = 0; b < cut[0].length; ++b)
        for (std::int64_t h = 0; h < cut[1].length; ++h)
            for (std::int64_t i = 0; i < cut[2].length; ++i)
                for (std::int64_t j = 0; j < cut[3].length; ++j)
                    at(static_cast<std::size_t>(
                        (((b + cut[0].begin) * full[1] + h + cut[1].begin) * full[2] + i + cut[2].begin) * full[3] +
                        j + cut[3].begin));
    return part_shape;
}

// Part of a mask, copied C-contiguous.
template <class T>
std::vector<T> mask_part(const std::vector<T>& mask, const std::vector<std::int64_t>& shape,
                         const std::array<Range, 4>& box, std::vector<std::int64_t>& part_shape) {
    std::vector<T> out;
    part_shape = for_each_in_part(shape, box, [&](std::size_t x) { out.push_back(mask[x]); });
    return out;
}

inline std::vector<Range> cuts(std::int64_t n, std::initializer_list<std::int64_t> starts) {
    std::vector<Range> r;
    std::vector<std::int64_t> s(starts);
    s.push_back(n);
    for (std::size_t i = 0; i + 1 < s.size(); ++i)
        if (s[i + 1] > s[i]) r.push_back({s[i], s[i + 1] - s[i]});
    return r;
}

struct Whole {
    std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 23, Nkv = 61, D = 16;
    DType dtype = DType::f32;
    Impl impl = Impl::automatic;
    AttentionOptions options;
    bool lengths = false, bool_mask = false, float_mask = false, slopes = false, sinks = false;
};

// A whole call's random inputs (the same for a seed): tensors, key lengths, masks, slopes, sinks.
struct WholeData {
    static constexpr std::array<std::int32_t, 2> kLengths{45, 61};
    HostTensor q, k, v;
    std::vector<std::int32_t> lengths{kLengths.begin(), kLengths.end()};
    std::vector<std::int64_t> bool_shape, float_shape;
    std::vector<std::uint8_t> allowed;
    std::vector<float> added, slopes, sinks;
    AttentionInputs in;

    WholeData(const Whole& w, std::mt19937& rng)
        : q(random_tensor(rng, w.dtype, Layout::bnhd, {w.B, w.Hq, w.Nq, w.D})),
          k(random_tensor(rng, w.dtype, Layout::bhnd, {w.B, w.Hkv, w.Nkv, w.D})),
          v(random_tensor(rng, w.dtype, Layout::bhnd, {w.B, w.Hkv, w.Nkv, w.D})),
          bool_shape{w.B, 1, w.Nq, w.Nkv},
          float_shape{w.Hq, w.Nq, w.Nkv},
          allowed(static_cast<std::size_t>(w.B * w.Nq * w.Nkv)),
          added(static_cast<std::size_t>(w.Hq * w.Nq * w.Nkv)) {
        std::bernoulli_distribution keep(0.8);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (auto& a : allowed) a = keep(rng) ? 1 : 0;
        for (auto& a : added) a = keep(rng) ? uniform(rng) : -std::numeric_limits<float>::infinity();
        for (std::int64_t h = 0; h < w.Hq; ++h) {
            slopes.push_back(0.05f + 0.1f * static_cast<float>(h));
            sinks.push_back(uniform(rng));
        }
        in = {.q = q.view(), .k = k.view(), .v = v.view()};
        if (w.lengths) in.kv_lengths = lengths;
        if (w.bool_mask) in.bool_mask = MaskView{allowed.data(), bool_shape};
        if (w.float_mask) in.float_mask = MaskView{added.data(), float_shape};
        if (w.slopes) in.alibi_slopes = slopes;
        if (w.sinks) in.sinks = sinks;
    }
    WholeData(const WholeData&) = delete;  // `in` points into the members

    // ALiBi's slopes for a block's heads: the given ones, or alibi_max_bias's standard slopes over
    // the whole's heads (blocks refuse the max bias), narrowed; empty without ALiBi.
    std::vector<float> slopes_of(const Whole& w, Range h) const {
        if (!w.slopes && !w.options.alibi_max_bias) return {};
        const std::vector<float> standard = w.options.alibi_max_bias ? alibi_slopes(w.Hq, *w.options.alibi_max_bias) : slopes;
        return {standard.begin() + h.begin, standard.begin() + h.begin + h.length};
    }
};

// What a named case changes of the default Whole.
using Setup = std::function<void(Whole&)>;

// Every feature a block must keep the whole's meaning of.
inline const std::vector<std::pair<const char*, Setup>>& feature_cases() {
    static const std::vector<std::pair<const char*, Setup>> cases{
        {"plain", [](Whole&) {}},
        {"top-left causal", [](Whole& w) { w.options.causal = Causal::top_left; }},
        {"bottom-right causal, key lengths", [](Whole& w) {
             w.options.causal = Causal::bottom_right;
             w.lengths = true;
         }},
        {"causal offset -4, window (7, -1)", [](Whole& w) {
             w.options.causal_offset = -4;
             w.options.window = {7, -1};
         }},
        {"window (5, 3) on a bottom-right diagonal, no causal", [](Whole& w) {
             w.options.window = {5, 3};
             w.options.diagonal_bottom_right = true;
             w.lengths = true;
         }},
        {"bool and float masks", [](Whole& w) { w.bool_mask = w.float_mask = true; }},
        {"ALiBi slopes, softcap", [](Whole& w) {
             w.slopes = true;
             w.options.softcap = 2.0;
         }},
        {"sinks", [](Whole& w) { w.sinks = true; }},
        {"dropout", [](Whole& w) {
             w.options.dropout = 0.3;
             w.options.seed = 99;
         }},
        {"everything", [](Whole& w) {
             w.options.causal = Causal::bottom_right;
             w.options.window = {30, -1};
             w.options.softcap = 3.0;
             w.options.dropout = 0.2;
             w.options.seed = 7;
             w.lengths = w.bool_mask = w.float_mask = w.slopes = w.sinks = true;
         }},
    };
    return cases;
}

}  // namespace vkattn::block_test

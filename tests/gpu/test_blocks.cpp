// Blocks of a larger attention (AttentionOptions::block), the ground sharding stands on: a whole
// call cut into blocks of batches, query heads (by K/V head group), query rows and keys, each run
// alone with its origin and its own slices of the masks, slopes and lengths, and the key blocks of
// each query block merged by their log-sum-exp, equals the whole: every mask and model feature
// keeps its meaning, dropout included (the whole's Philox numbers), the sinks counted once.
#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

struct Range {
    std::int64_t begin, length;
};

// Part of a host view: its batches, heads and rows (no copy).
TensorView part(const TensorView& t, Range b, Range h, Range n) {
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

std::vector<Range> cuts(std::int64_t n, std::initializer_list<std::int64_t> starts) {
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

// Runs `w` whole on the CPU reference and in blocks on the device; compares o and lse.
void expect_blocks_equal_whole(const Whole& w, unsigned seed) {
    Context& ctx = test::gpu_context();
    std::mt19937 rng(seed);
    const WholeData data(w, rng);
    const AttentionInputs& whole_in = data.in;
    const auto& [lengths, bool_shape, float_shape, allowed, added, sinks] =
        std::tie(data.lengths, data.bool_shape, data.float_shape, data.allowed, data.added, data.sinks);
    HostTensor want = nan_tensor(w.dtype, Layout::bhnd, {w.B, w.Hq, w.Nq, w.D});
    std::vector<float> want_lse(static_cast<std::size_t>(w.B * w.Hq * w.Nq));
    reference_attention(whole_in, {.o = want.mutable_view(), .lse = want_lse.data()}, w.options);
    const std::vector<double> want_o = want.doubles();

    // The blocks: batches one by one, query heads by K/V head (group of 2), rows and keys cut unevenly.
    std::vector<double> got_o(want_o.size(), std::numeric_limits<double>::quiet_NaN());
    std::vector<double> got_lse(want_lse.size(), std::numeric_limits<double>::quiet_NaN());
    const std::int64_t g = w.Hq / w.Hkv;
    for (const Range b : cuts(w.B, {0, 1}))
        for (const Range hk : cuts(w.Hkv, {0, 1}))
            for (const Range i : cuts(w.Nq, {0, 9})) {
                const Range h{hk.begin * g, hk.length * g};
                const std::size_t rows = static_cast<std::size_t>(b.length * h.length * i.length);
                std::vector<double> m(rows, -INFINITY), acc(rows * static_cast<std::size_t>(w.D), 0.0);
                bool first_key_block = true;
                for (const Range j : cuts(w.Nkv, {0, 20, 37})) {
                    AttentionInputs in{.q = part(whole_in.q, b, h, i), .k = part(whole_in.k, b, hk, j),
                                       .v = part(whole_in.v, b, hk, j)};
                    std::vector<std::int32_t> len;
                    if (w.lengths) in.kv_lengths = len = {lengths.begin() + b.begin, lengths.begin() + b.begin + b.length};
                    std::vector<std::int64_t> bs, fs;
                    std::vector<std::uint8_t> bool_part;
                    std::vector<float> float_part;
                    if (w.bool_mask) {
                        bool_part = mask_part(allowed, bool_shape, {b, h, i, j}, bs);
                        in.bool_mask = MaskView{bool_part.data(), bs};
                    }
                    if (w.float_mask) {
                        float_part = mask_part(added, float_shape, {b, h, i, j}, fs);
                        in.float_mask = MaskView{float_part.data(), fs};
                    }
                    const std::vector<float> slope_part = data.slopes_of(w, h);
                    const std::vector<float> sink_part(sinks.begin() + h.begin, sinks.begin() + h.begin + h.length);
                    in.alibi_slopes = slope_part;
                    if (w.sinks && first_key_block) in.sinks = sink_part;  // counted once per row
                    AttentionOptions options = w.options;
                    options.alibi_max_bias.reset();
                    options.impl = w.impl;
                    options.block = {.batch = b.begin, .head = h.begin, .query = i.begin, .key = j.begin,
                                     .queries = w.Nq, .keys = w.Nkv};
                    HostTensor o = nan_tensor(w.dtype, Layout::bhnd, {b.length, h.length, i.length, w.D});
                    std::vector<float> lse(rows, std::numeric_limits<float>::quiet_NaN());
                    attention(ctx, in, {.o = o.mutable_view(), .lse = lse.data()}, options);
                    // Merge: out = Σ e^(lse_s - lse) o_s, lse = log Σ e^(lse_s), running.
                    for (std::size_t r = 0; r < rows; ++r) {
                        const double ls = lse[r];
                        if (ls == -INFINITY) continue;  // no visible key in this block
                        const double mm = std::max(m[r], ls);
                        const double old_scale = m[r] == -INFINITY ? 0.0 : std::exp(m[r] - mm);
                        const double new_scale = std::exp(ls - mm);
                        const auto row = static_cast<std::int64_t>(r);
                        for (std::int64_t d = 0; d < w.D; ++d) {
                            const auto x = static_cast<std::size_t>(r * static_cast<std::size_t>(w.D) + static_cast<std::size_t>(d));
                            const double od = o.at(row / (h.length * i.length), row / i.length % h.length, row % i.length, d);
                            acc[x] = acc[x] * old_scale + new_scale * od;
                        }
                        // m holds the running lse: acc is normalised to it.
                        const double sum = old_scale + new_scale;
                        for (std::int64_t d = 0; d < w.D; ++d)
                            acc[r * static_cast<std::size_t>(w.D) + static_cast<std::size_t>(d)] /= sum;
                        m[r] = mm + std::log(sum);
                    }
                    first_key_block = false;
                }
                for (std::int64_t bb = 0; bb < b.length; ++bb)
                    for (std::int64_t hh = 0; hh < h.length; ++hh)
                        for (std::int64_t ii = 0; ii < i.length; ++ii) {
                            const auto r = static_cast<std::size_t>((bb * h.length + hh) * i.length + ii);
                            const auto whole_row = static_cast<std::size_t>(
                                ((b.begin + bb) * w.Hq + h.begin + hh) * w.Nq + i.begin + ii);
                            got_lse[whole_row] = m[r];
                            for (std::int64_t d = 0; d < w.D; ++d)
                                got_o[whole_row * static_cast<std::size_t>(w.D) + static_cast<std::size_t>(d)] =
                                    m[r] == -INFINITY ? 0.0 : acc[r * static_cast<std::size_t>(w.D) + static_cast<std::size_t>(d)];
                        }
            }
    const Comparison o_cmp = compare(got_o, want_o, tolerance_for(w.dtype));
    const Comparison lse_cmp = compare_lse(got_lse, {want_lse.begin(), want_lse.end()});
    INFO("o: " << o_cmp.message << "\nlse: " << lse_cmp.message);
    CHECK(o_cmp.ok);
    CHECK(lse_cmp.ok);
    CHECK(test::take_validation_messages(ctx).empty());
}

// A host array as a device tensor of `shape` (left-padded with 1s to rank 4), e.g. a mask's part.
template <class T>
DeviceTensor device_array(Context& ctx, const std::vector<T>& values, DType dtype, std::vector<std::int64_t> shape) {
    std::array<std::int64_t, 4> s{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), s.begin() + static_cast<std::ptrdiff_t>(4 - shape.size()));
    return DeviceTensor::from_host(ctx, make_view(static_cast<const void*>(values.data()), dtype, Layout::bhnd, s));
}

// The backward in blocks: each block's gradients on the device (attention_backward on device
// tensors) given the whole's o and lse rows; dq summed over key blocks, dk and dv over query
// blocks, the sinks' gradient taken once per row (the first key block's), the float mask's added
// back at its block's place: equals the whole's reference gradients.
void expect_block_gradients_equal_whole(const Whole& w, unsigned seed) {
    Context& ctx = test::gpu_context();
    std::mt19937 rng(seed);
    const WholeData data(w, rng);
    const HostTensor grad_out = random_tensor(rng, w.dtype, Layout::bhnd, {w.B, w.Hq, w.Nq, w.D});
    HostTensor o = nan_tensor(w.dtype, Layout::bhnd, {w.B, w.Hq, w.Nq, w.D});
    std::vector<float> lse(static_cast<std::size_t>(w.B * w.Hq * w.Nq));
    reference_attention(data.in, {.o = o.mutable_view(), .lse = lse.data()}, w.options);
    HostTensor want_dq = nan_tensor(w.dtype, Layout::bhnd, {w.B, w.Hq, w.Nq, w.D});
    HostTensor want_dk = nan_tensor(w.dtype, Layout::bhnd, {w.B, w.Hkv, w.Nkv, w.D});
    HostTensor want_dv = nan_tensor(w.dtype, Layout::bhnd, {w.B, w.Hkv, w.Nkv, w.D});
    std::vector<float> want_d_sinks(static_cast<std::size_t>(w.Hq)), want_d_mask(data.added.size());
    reference_attention_backward(data.in, grad_out.view(),
                                 {.dq = want_dq.mutable_view(), .dk = want_dk.mutable_view(), .dv = want_dv.mutable_view(),
                                  .d_sinks = w.sinks ? want_d_sinks.data() : nullptr,
                                  .d_float_mask = w.float_mask ? want_d_mask.data() : nullptr},
                                 w.options);

    std::vector<double> dq(static_cast<std::size_t>(w.B * w.Hq * w.Nq * w.D)), dk(static_cast<std::size_t>(w.B * w.Hkv * w.Nkv * w.D));
    std::vector<double> dv(dk.size()), d_sinks(want_d_sinks.size()), d_mask(want_d_mask.size());
    const std::int64_t g = w.Hq / w.Hkv;
    for (const Range b : cuts(w.B, {0, 1}))
        for (const Range hk : cuts(w.Hkv, {0, 1}))
            for (const Range i : cuts(w.Nq, {0, 9})) {
                const Range h{hk.begin * g, hk.length * g};
                std::vector<float> lse_rows;  // the whole's, this block's rows
                for (std::int64_t bb = 0; bb < b.length; ++bb)
                    for (std::int64_t hh = 0; hh < h.length; ++hh)
                        for (std::int64_t ii = 0; ii < i.length; ++ii)
                            lse_rows.push_back(lse[static_cast<std::size_t>(((b.begin + bb) * w.Hq + h.begin + hh) * w.Nq + i.begin + ii)]);
                const DeviceTensor o_rows = DeviceTensor::from_host(ctx, part(o.view(), b, h, i));
                const DeviceTensor lse_d = device_array(ctx, lse_rows, DType::f32, {b.length, h.length, i.length, 1});
                const DeviceTensor grad_rows = DeviceTensor::from_host(ctx, part(grad_out.view(), b, h, i));
                for (const Range j : cuts(w.Nkv, {0, 20, 37})) {
                    const bool first_key_block = j.begin == 0;
                    DeviceAttentionInputs in{.q = DeviceTensor::from_host(ctx, part(data.in.q, b, h, i)),
                                             .k = DeviceTensor::from_host(ctx, part(data.in.k, b, hk, j)),
                                             .v = DeviceTensor::from_host(ctx, part(data.in.v, b, hk, j))};
                    const std::vector<std::int32_t> len(data.lengths.begin() + b.begin, data.lengths.begin() + b.begin + b.length);
                    if (w.lengths) in.kv_lengths = device_array(ctx, len, DType::i32, {b.length});
                    std::vector<std::int64_t> bs, fs;
                    const std::vector<std::uint8_t> bool_part = mask_part(data.allowed, data.bool_shape, {b, h, i, j}, bs);
                    const std::vector<float> float_part = mask_part(data.added, data.float_shape, {b, h, i, j}, fs);
                    if (w.bool_mask) in.bool_mask = device_array(ctx, bool_part, DType::u8, bs);
                    if (w.float_mask) in.float_mask = device_array(ctx, float_part, DType::f32, fs);
                    const std::vector<float> slope_part = data.slopes_of(w, h);
                    const std::vector<float> sink_part(data.sinks.begin() + h.begin, data.sinks.begin() + h.begin + h.length);
                    in.alibi_slopes = slope_part;
                    if (w.sinks && first_key_block) in.sinks = sink_part;
                    AttentionOptions options = w.options;
                    options.alibi_max_bias.reset();
                    options.impl = w.impl;
                    options.block = {.batch = b.begin, .head = h.begin, .query = i.begin, .key = j.begin,
                                     .queries = w.Nq, .keys = w.Nkv};
                    const DeviceAttentionGradients grads{
                        .dq = DeviceTensor::empty(ctx, w.dtype, {b.length, h.length, i.length, w.D}),
                        .dk = DeviceTensor::empty(ctx, w.dtype, {b.length, hk.length, j.length, w.D}),
                        .dv = DeviceTensor::empty(ctx, w.dtype, {b.length, hk.length, j.length, w.D}),
                        .d_sinks = in.sinks.empty() ? DeviceTensor{} : DeviceTensor::empty(ctx, DType::f32, {1, 1, 1, h.length}),
                        .d_float_mask = w.float_mask ? DeviceTensor::empty(ctx, DType::f32, in.float_mask.shape()) : DeviceTensor{}};
                    HostTensor got_dq = nan_tensor(w.dtype, Layout::bhnd, grads.dq.shape());
                    HostTensor got_dk = nan_tensor(w.dtype, Layout::bhnd, grads.dk.shape());
                    HostTensor got_dv = nan_tensor(w.dtype, Layout::bhnd, grads.dv.shape());
                    std::vector<float> got_d_sinks(static_cast<std::size_t>(h.length), NAN), got_d_mask(float_part.size(), NAN);
                    Batch batch(ctx);
                    attention_backward(batch, in, o_rows, lse_d, grad_rows, grads, options);
                    batch.download(grads.dq, got_dq.mutable_view());
                    batch.download(grads.dk, got_dk.mutable_view());
                    batch.download(grads.dv, got_dv.mutable_view());
                    if (grads.d_sinks.defined())
                        batch.download(grads.d_sinks, make_view(static_cast<void*>(got_d_sinks.data()), DType::f32, Layout::bhnd,
                                                                grads.d_sinks.shape()));
                    if (grads.d_float_mask.defined())
                        batch.download(grads.d_float_mask, make_view(static_cast<void*>(got_d_mask.data()), DType::f32,
                                                                     Layout::bhnd, grads.d_float_mask.shape()));
                    batch.submit().wait();

                    for (std::int64_t bb = 0; bb < b.length; ++bb)
                        for (std::int64_t d = 0; d < w.D; ++d) {
                            for (std::int64_t hh = 0; hh < h.length; ++hh)
                                for (std::int64_t ii = 0; ii < i.length; ++ii)
                                    dq[static_cast<std::size_t>((((b.begin + bb) * w.Hq + h.begin + hh) * w.Nq + i.begin + ii) * w.D + d)] +=
                                        got_dq.at(bb, hh, ii, d);
                            for (std::int64_t hh = 0; hh < hk.length; ++hh)
                                for (std::int64_t jj = 0; jj < j.length; ++jj) {
                                    const auto x = static_cast<std::size_t>(
                                        (((b.begin + bb) * w.Hkv + hk.begin + hh) * w.Nkv + j.begin + jj) * w.D + d);
                                    dk[x] += got_dk.at(bb, hh, jj, d);
                                    dv[x] += got_dv.at(bb, hh, jj, d);
                                }
                        }
                    if (grads.d_sinks.defined())
                        for (std::int64_t hh = 0; hh < h.length; ++hh)
                            d_sinks[static_cast<std::size_t>(h.begin + hh)] += got_d_sinks[static_cast<std::size_t>(hh)];
                    std::size_t at = 0;
                    if (w.float_mask)
                        for_each_in_part(data.float_shape, {b, h, i, j}, [&](std::size_t x) { d_mask[x] += got_d_mask[at++]; });
                }
            }
    const Tolerance tol = gradient_tolerance_for(w.dtype);
    for (const auto& [got, want, name] : {std::tuple{&dq, want_dq.doubles(), "dq"}, std::tuple{&dk, want_dk.doubles(), "dk"},
                                          std::tuple{&dv, want_dv.doubles(), "dv"},
                                          std::tuple{&d_sinks, std::vector<double>(want_d_sinks.begin(), want_d_sinks.end()), "d_sinks"},
                                          std::tuple{&d_mask, std::vector<double>(want_d_mask.begin(), want_d_mask.end()), "d_float_mask"}}) {
        const Comparison cmp = compare(*got, want, tol);
        INFO(name << ": " << cmp.message);
        CHECK(cmp.ok);
    }
    CHECK(test::take_validation_messages(ctx).empty());
}

using Setup = std::function<void(Whole&)>;

// Every feature a block must keep the whole's meaning of.
const std::vector<std::pair<const char*, Setup>>& feature_cases() {
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

}  // namespace

TEST_CASE("blocks: a whole cut into blocks and merged by lse equals the whole, every feature", "[gpu][blocks]") {
    for (const Impl impl : {Impl::unfused, Impl::fused, Impl::split})
        for (const auto& [name, setup] : feature_cases()) {
            INFO(name << ", " << to_string(impl));
            Whole w;
            w.impl = impl;
            setup(w);
            expect_blocks_equal_whole(w, 31);
        }
}

TEST_CASE("blocks: each block's backward, given the whole's o and lse, sums to the whole's gradients", "[gpu][blocks]") {
    for (const Impl impl : {Impl::unfused, Impl::fused})
        for (const auto& [name, setup] : feature_cases()) {
            INFO(name << ", " << to_string(impl));
            Whole w;
            w.impl = impl;
            setup(w);
            expect_block_gradients_equal_whole(w, 47);
        }
    Whole f16;
    f16.dtype = DType::f16;
    f16.options.causal = Causal::bottom_right;
    f16.options.alibi_max_bias = 8.0;
    expect_block_gradients_equal_whole(f16, 5);
}

TEST_CASE("blocks: ALiBi's standard slopes narrowed to the blocks' heads, and f16", "[gpu][blocks]") {
    Whole w;
    w.dtype = DType::f16;
    w.options.alibi_max_bias = 8.0;
    w.options.causal = Causal::top_left;
    expect_blocks_equal_whole(w, 5);
}

TEST_CASE("blocks: bad origins and sizes are named", "[gpu][blocks]") {
    Context& ctx = test::gpu_context();
    const HostTensor q = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 3, 8});
    const HostTensor k = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 5, 8});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 3, 8});
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = k.view()};
    const AttentionOutputs out{.o = o.mutable_view()};
    auto refused = [&](Block block, const char* says, std::optional<double> max_bias = std::nullopt) {
        AttentionOptions options{.alibi_max_bias = max_bias, .block = block};
        CHECK_THROWS_WITH(attention(ctx, in, out, options), Catch::StartsWith("block: ") && Catch::Contains(says));
    };
    refused({.query = -1}, "query");
    refused({.key = 4, .keys = 8}, "fewer");
    refused({.queries = 2}, "fewer");
    refused({.head = 2}, "alibi_slopes", 8.0);
    refused({.key = 1}, "alibi_slopes", 8.0);  // head origin 0, yet the whole may have more heads
    refused({.key = std::int64_t{1} << 31}, "2^30");
    // Key lengths count the whole's keys: up to `keys`, and no further.
    const std::vector<std::int32_t> long_length{9}, too_long{10};
    AttentionInputs with_lengths = in;
    with_lengths.kv_lengths = long_length;
    CHECK_NOTHROW(attention(ctx, with_lengths, out, {.block = {.key = 4, .keys = 9}}));
    with_lengths.kv_lengths = too_long;
    CHECK_THROWS_WITH(attention(ctx, with_lengths, out, {.block = {.key = 4, .keys = 9}}),
                      Catch::StartsWith("kv_lengths: ") && Catch::Contains("9"));
    // The host backward runs its own forward (the block's o and lse, not the whole's): refused.
    const HostTensor grad = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 3, 8});
    HostTensor dq = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 3, 8});
    CHECK_THROWS_WITH(attention_backward(ctx, in, grad.view(), {.dq = dq.mutable_view()}, {.block = {.key = 1}}),
                      Catch::StartsWith("block: "));
    CHECK(test::take_validation_messages(ctx).empty());
}

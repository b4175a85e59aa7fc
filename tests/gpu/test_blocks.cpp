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

#include "support/block_cases.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::block_test;

namespace {

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

// Blocks of a larger attention, backward: each block's gradients on the device, given the whole's o
// and lse rows, summed over the blocks, equal the whole's reference gradients (support/block_cases.hpp).
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

}  // namespace

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

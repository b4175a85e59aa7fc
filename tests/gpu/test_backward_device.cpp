// The backward pass at scale and on device tensors: the causal backward's memory at N = 32,768,
// device tensors giving the host call's bits (views at offsets, refusals named), and tensors past
// one binding cut by heads. The cases and their check: support/backward_case.hpp.
#include "support/catch.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention/tuning.hpp"
#include "runtime.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/plan.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/reference.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "support/backward_case.hpp"

using namespace vkattn;
using namespace vkattn::test;

TEST_CASE("memory: the causal backward at N = 32768 stays O(N*D)", "[gpu][memory][.]") {
    const std::int64_t N = 32768, D = 64;
    BackwardCase c;
    c.name = "memory";
    c.B = 1, c.Hq = 1, c.Hkv = 1, c.Nq = N, c.Nkv = N, c.Dk = D, c.Dv = D;
    c.options.causal = Causal::top_left;
    const Inputs in(c, 32768);
    Gradients g = gradients_like(in, c);
    const AttentionReport report =
        attention_backward(test::gpu_context(), in.in, in.grad_out.view(), views(g, false), c.options);
    const double n_squared_bytes = static_cast<double>(N) * N * 4;
    WARN("backward N=32768 D=64 causal: device memory " << report.device_bytes / (1 << 20) << " MiB (an N^2 score matrix: "
                                                        << n_squared_bytes / (1 << 30) << " GiB), " << report.gpu_ms << " ms");
    // q, k, v, o, dO, dq, dk, dv (N·D each) and lse, Δ (N each): nothing grows with N².
    const auto tensor_bytes = static_cast<std::uint64_t>(N * D * 4);
    CHECK(report.device_bytes < 9 * tensor_bytes);
    CHECK(report.device_bytes < (std::uint64_t{1} << 30));  // issue #14's bound

    // Sampled rows of dQ against double precision: row i needs only its own keys j <= i.
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (const std::int64_t i : {std::int64_t{0}, std::int64_t{1}, std::int64_t{4095}, std::int64_t{20000}, N - 1}) {
        std::vector<double> s(static_cast<std::size_t>(i + 1)), dp(s.size());
        double m = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
            double dot = 0, dpj = 0;
            for (std::int64_t d = 0; d < D; ++d) {
                dot += double(in.q.at(0, 0, i, d)) * in.k.at(0, 0, j, d);
                dpj += double(in.grad_out.at(0, 0, i, d)) * in.v.at(0, 0, j, d);
            }
            s[static_cast<std::size_t>(j)] = dot * scale;
            dp[static_cast<std::size_t>(j)] = dpj;
            m = std::max(m, s[static_cast<std::size_t>(j)]);
        }
        double sum = 0, delta = 0;
        for (auto& x : s) sum += (x = std::exp(x - m));
        for (std::size_t j = 0; j < s.size(); ++j) delta += (s[j] /= sum) * dp[j];
        for (std::int64_t d = 0; d < D; ++d) {
            double want = 0;
            for (std::int64_t j = 0; j <= i; ++j)
                want += s[static_cast<std::size_t>(j)] * (dp[static_cast<std::size_t>(j)] - delta) * in.k.at(0, 0, j, d);
            want *= scale;
            INFO("dq row " << i << " column " << d);
            CHECK(g.dq.at(0, 0, i, d) == Approx(want).margin(1e-5).epsilon(1e-4));
        }
    }
}

TEST_CASE("gpu backward on device tensors: the host call's bits, views at offsets, refusals named", "[gpu][backward]") {
    BackwardCase c;
    c.name = "device";
    c.Nq = 33, c.Nkv = 40;
    c.options.causal = Causal::bottom_right;
    c.sinks = true;
    const Inputs in(c, 6000);
    Gradients host = gradients_like(in, c);
    attention_backward(test::gpu_context(), in.in, in.grad_out.view(), views(host, true), c.options);

    Context& context = test::gpu_context();
    DeviceAttentionInputs din;
    din.q = DeviceTensor::from_host(context, in.q.view());
    din.k = DeviceTensor::from_host(context, in.k.view());
    din.v = DeviceTensor::from_host(context, in.v.view());
    din.sinks = in.sinks;
    const DeviceTensor grad_out = DeviceTensor::from_host(context, in.grad_out.view());
    DeviceAttentionOutputs forward{.o = DeviceTensor::empty(context, DType::f32, {c.B, c.Hq, c.Nq, c.Dv}),
                                   .lse = DeviceTensor::empty(context, DType::f32, {c.B, c.Hq, c.Nq, 1})};
    // dq at an offset inside a larger tensor: the view of batches 1.. of a [B + 1, ...] buffer.
    const DeviceTensor dq_store = DeviceTensor::empty(context, DType::f32, {c.B + 1, c.Hq, c.Nq, c.Dk});
    DeviceAttentionGradients grads{.dq = dq_store.batch(1, c.B),
                                   .dk = DeviceTensor::empty(context, DType::f32, {c.B, c.Hkv, c.Nkv, c.Dk}),
                                   .dv = DeviceTensor::empty(context, DType::f32, {c.B, c.Hkv, c.Nkv, c.Dv}),
                                   .d_sinks = DeviceTensor::empty(context, DType::f32, {1, 1, 1, c.Hq})};
    Batch batch(context);
    attention(context, din, forward, c.options);  // o and lse, as a training step keeps them
    const AttentionReport report = attention_backward(batch, din, forward.o, forward.lse, grad_out, grads, c.options);
    CHECK_THAT(report.variant, Catch::Contains("backward["));
    batch.submit().wait();
    Gradients device = gradients_like(in, c);
    grads.dq.download(device.dq.mutable_view());
    grads.dk.download(device.dk.mutable_view());
    grads.dv.download(device.dv.mutable_view());
    grads.d_sinks.download(make_view<void*>(device.d_sinks.data(), DType::f32, Layout::bhnd, {1, 1, 1, c.Hq}));
    CHECK(device.dq.f32 == host.dq.f32);
    CHECK(device.dk.f32 == host.dk.f32);
    CHECK(device.dv.f32 == host.dv.f32);
    CHECK(device.d_sinks == host.d_sinks);

    auto refused = [&](const std::string& argument, auto&& call) {
        INFO(argument);
        Batch b(context);
        try {
            call(b);
            FAIL("no error");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == argument);
        }
    };
    refused("lse", [&](Batch& b) { attention_backward(b, din, forward.o, DeviceTensor(), grad_out, grads, c.options); });
    refused("lse", [&](Batch& b) { attention_backward(b, din, forward.o, forward.o, grad_out, grads, c.options); });
    refused("grad_out", [&](Batch& b) { attention_backward(b, din, forward.o, forward.lse, din.k, grads, c.options); });
    refused("dv", [&](Batch& b) {
        DeviceAttentionGradients only_dk{.dk = grads.dk};
        attention_backward(b, din, forward.o, forward.lse, grad_out, only_dk, c.options);
    });
    refused("dq", [&](Batch& b) {
        DeviceAttentionGradients wrong{.dq = grads.dk};
        attention_backward(b, din, forward.o, forward.lse, grad_out, wrong, c.options);
    });
    CHECK(test::take_validation_messages(context).empty());
}

TEST_CASE("gpu backward: tensors past one binding are cut by heads, the same bits as whole", "[gpu][backward][slicing]") {
    BackwardCase c;
    c.name = "chunks";
    c.B = 3, c.Hq = 4, c.Hkv = 2, c.Nq = 40, c.Nkv = 50, c.Dk = c.Dv = 32;
    c.options.causal = Causal::bottom_right;
    c.kv_lengths = {50, 31, 7};
    c.sinks = true;
    c.bool_mask = std::vector<std::int64_t>{3, 1, 40, 50};
    c.layout = Layout::bnhd;  // interleaved heads: a unit's rows are strided through the whole tensor
    const Inputs in(c, 7000);
    Gradients whole = gradients_like(in, c), cut = gradients_like(in, c);
    attention_backward(test::gpu_context(), in.in, in.grad_out.view(), views(whole, true), c.options);
    // A binding holds one batch's q (4·40·32·4 bytes = 20 KiB) but not two: the work runs per unit
    // chunk (the forward slices its own way).
    ContextOptions options = test::test_context_options();
    options.max_binding_bytes = 24 * 1024;
    Context limited(options);
    const AttentionReport report = attention_backward(limited, in.in, in.grad_out.view(), views(cut, true), c.options);
    INFO(report.variant);
    CHECK(report.slices > 1);
    CHECK(cut.dq.f32 == whole.dq.f32);
    CHECK(cut.dk.f32 == whole.dk.f32);
    CHECK(cut.dv.f32 == whole.dv.f32);
    CHECK(cut.d_sinks == whole.d_sinks);
    CHECK(test::take_validation_messages(limited).empty());

    // One unit's share past the limit: refused (here by the forward's planner first, which the host
    // call runs), naming the tensor and the limit.
    options.max_binding_bytes = 4 * 1024;
    Context tiny(options);
    Gradients none = gradients_like(in, c);
    try {
        attention_backward(tiny, in.in, in.grad_out.view(), views(none, true), c.options);
        FAIL("no error");
    } catch (const ResourceLimit& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains("limit of 4096 bytes"));
    }
}

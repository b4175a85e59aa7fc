// How the benchmarks measure (vkattn/testing/attention_timing.hpp, clock_probe.hpp, benchmark.hpp's
// WarmUp): attention timed on device-resident tensors computes what the host call computes, runs as
// many untimed runs as asked and times `repeat`; the clock probe reads the device's shader clock
// where the device can, and says nothing where it cannot.
#include "support/catch.hpp"

#include <array>
#include <chrono>
#include <random>

#include "support/gpu_context.hpp"
#include "vk/device_caps.hpp"
#include "context_state.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/attention_timing.hpp"
#include "vkattn/testing/clock_probe.hpp"
#include "vkattn/testing/random.hpp"

using namespace vkattn;
using namespace vkattn::test;

namespace {

// A causal GQA call with per-sequence key lengths, off every tile's size, and its outputs poisoned.
struct TimedCall {
    std::mt19937 rng{7};
    testing::HostTensor q = testing::random_tensor(rng, DType::f16, Layout::bhnd, {2, 4, 37, 24});
    testing::HostTensor k = testing::random_tensor(rng, DType::f16, Layout::bhnd, {2, 2, 53, 24});
    testing::HostTensor v = testing::random_tensor(rng, DType::f16, Layout::bhnd, {2, 2, 53, 24});
    std::vector<std::int32_t> lengths{53, 29};
    AttentionInputs inputs() const {
        AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
        in.kv_lengths = lengths;
        return in;
    }
    AttentionOptions options{.causal = Causal::bottom_right};
};

}  // namespace

TEST_CASE("attention timed on device tensors: the host call's outputs, the runs asked for", "[gpu][measurement]") {
    Context& context = gpu_context();
    TimedCall call;
    testing::HostTensor by_host = testing::nan_tensor(DType::f16, Layout::bhnd, {2, 4, 37, 24});
    std::vector<float> lse_host(2 * 4 * 37, -1.0f);
    const AttentionReport host_report =
        attention(context, call.inputs(), {.o = by_host.mutable_view(), .lse = lse_host.data()}, call.options);

    testing::HostTensor timed = testing::nan_tensor(DType::f16, Layout::bhnd, {2, 4, 37, 24});
    std::vector<float> lse_timed(lse_host.size(), -1.0f);
    const testing::AttentionTiming t = testing::time_attention(
        context, call.inputs(), {.o = timed.mutable_view(), .lse = lse_timed.data()}, call.options, testing::WarmUp(3), 4);
    CHECK(t.warmup_runs == 3);
    REQUIRE(t.samples_ms.size() == 4);
    if (detail::ContextAccess::runtime(context).device().caps().timestamps)
        for (double ms : t.samples_ms) CHECK(ms > 0);
    // The same plan and kernel as the host call's, so the same bits.
    CHECK(t.report.variant == host_report.variant);
    CHECK(t.report.flops == host_report.flops);
    CHECK(timed.f16 == by_host.f16);
    CHECK(lse_timed == lse_host);
    CHECK(take_validation_messages(context).empty());

    CHECK_THROWS_AS(testing::time_attention(context, call.inputs(), {.o = timed.mutable_view()}, call.options, 0, 0),
                    InvalidArgument);
}

TEST_CASE("warm-up by time: runs until the wall time has passed after the first", "[gpu][measurement]") {
    Context& context = gpu_context();
    TimedCall call;
    testing::HostTensor o = testing::nan_tensor(DType::f16, Layout::bhnd, {2, 4, 37, 24});
    const auto start = std::chrono::steady_clock::now();
    const testing::AttentionTiming t =
        testing::time_attention(context, call.inputs(), {.o = o.mutable_view()}, call.options, testing::WarmUp(1, 150), 1);
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    CHECK(t.warmup_runs >= 2);  // the first, then at least one more within the 150 ms
    CHECK(elapsed.count() >= 150);
    CHECK(t.samples_ms.size() == 1);
    // No warm-up at all: the first run is timed.
    CHECK(testing::time_attention(context, call.inputs(), {.o = o.mutable_view()}, call.options, testing::WarmUp(0), 2)
              .warmup_runs == 0);
}

TEST_CASE("the clock probe reads the shader clock where the device can", "[gpu][measurement]") {
    Context& context = gpu_context();
    const vk::DeviceCaps& caps = detail::ContextAccess::runtime(context).device().caps();
    const std::optional<double> mhz = testing::shader_clock_mhz(context);
    CHECK(mhz.has_value() == (caps.subgroup_clock && caps.timestamps));
    if (mhz) {
        INFO("shader clock " << *mhz << " MHz");
        // Any device's clock (lavapipe's counts nanoseconds: ~1,000): the probe's two lengths were
        // told apart and their difference was timed.
        CHECK(*mhz > 10);
        CHECK(*mhz < 20000);
    }
    CHECK(take_validation_messages(context).empty());
}

TEST_CASE("the backward timed on device tensors: the host call's gradients, the runs asked for", "[gpu][measurement][backward]") {
    Context& context = gpu_context();
    TimedCall call;
    const testing::HostTensor grad_out = testing::random_tensor(call.rng, DType::f16, Layout::bhnd, {2, 4, 37, 24});
    auto gradients = [] {
        return std::array{testing::nan_tensor(DType::f16, Layout::bhnd, {2, 4, 37, 24}),
                          testing::nan_tensor(DType::f16, Layout::bhnd, {2, 2, 53, 24}),
                          testing::nan_tensor(DType::f16, Layout::bhnd, {2, 2, 53, 24})};
    };
    auto by_host = gradients(), timed = gradients();
    const AttentionReport host_report = attention_backward(
        context, call.inputs(), grad_out.view(),
        {.dq = by_host[0].mutable_view(), .dk = by_host[1].mutable_view(), .dv = by_host[2].mutable_view()}, call.options);
    const testing::AttentionTiming t = testing::time_attention_backward(
        context, call.inputs(), grad_out.view(),
        {.dq = timed[0].mutable_view(), .dk = timed[1].mutable_view(), .dv = timed[2].mutable_view()}, call.options,
        testing::WarmUp(2), 3);
    CHECK(t.warmup_runs == 2);
    CHECK(t.samples_ms.size() == 3);
    CHECK(t.report.variant == host_report.variant);
    for (std::size_t g = 0; g < timed.size(); ++g) CHECK(timed[g].f16 == by_host[g].f16);  // deterministic: the same bits
    CHECK(take_validation_messages(context).empty());
}

// The runtime around the kernels: stage-by-stage checks, slicing under a lowered binding limit,
// the staging path, the pipeline cache on disk, argument errors, and device selection.
#include "support/catch.hpp"

#include <filesystem>
#include <cmath>
#include <random>

#include "attention/problem.hpp"
#include "attention/tuning.hpp"
#include "attention/unfused.hpp"
#include "plan/plan_state.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/plan.hpp"
#include "runtime.hpp"
#include "support/expect_case.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/attention_case.hpp"
#include "vkattn/testing/benchmark.hpp"

using namespace vkattn;
using namespace vkattn::test;
using namespace vkattn::testing;

TEST_CASE("stage 1 alone: S = scale * Q * K^T", "[gpu][stages]") {
    const auto [nq, nkv, d] = GENERATE(std::tuple<std::int64_t, std::int64_t, std::int64_t>{7, 65, 24},
                                       std::tuple{63, 64, 80}, std::tuple{65, 13, 1});
    const bool texel = GENERATE(false, true);
    std::mt19937 rng(static_cast<unsigned>(nq * 1000 + nkv + d + texel));
    HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {2, 4, nq, d});
    HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {2, 2, nkv, d});
    HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {2, 2, nkv, d});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {2, 4, nq, d});
    std::vector<float> s(static_cast<std::size_t>(2 * 4 * nq * nkv), std::numeric_limits<float>::quiet_NaN());
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
    const AttentionOutputs out{.o = o.mutable_view(), .weights = s.data()};
    const AttentionOptions options{.scale = 0.3, .variant = {.texel_loads = texel}};

    Context& ctx = gpu_context();
    const detail::Problem p = detail::resolve(in, out, options);
    const auto& caps = detail::ContextAccess::runtime(ctx).device().caps();
    const auto config = detail::choose_unfused(caps, p, in.q.strides, in.k.strides, in.v.strides, options.variant);
    CHECK(config.scores.texel == (texel && d % 4 == 0 && caps.texel_rgba32f));  // D = 1 falls back to scalar loads
    // The plan as the host API makes it, stopped after stage 1; S lands in the weights.
    detail::PlanState plan(detail::ContextAccess::runtime(ctx), nullptr, detail::spec_of(in, out, options));
    REQUIRE(plan.choice.impl == Impl::unfused);
    plan.choice.unfused = config;
    plan.choice.stages = detail::UnfusedStages::scores_only;
    const DeviceAttentionInputs din{.q = DeviceTensor::from_host(ctx, in.q), .k = DeviceTensor::from_host(ctx, in.k),
                                    .v = DeviceTensor::from_host(ctx, in.v)};
    const DeviceAttentionOutputs dout{.o = DeviceTensor::empty(ctx, DType::f32, o.shape),
                                      .weights = DeviceTensor::empty(ctx, DType::f32, {2, 4, nq, nkv})};
    Batch batch(ctx);
    plan.run(detail::BatchAccess::state(batch), din, dout, false);
    batch.download(dout.weights, make_view(static_cast<void*>(s.data()), DType::f32, Layout::bhnd, {2, 4, nq, nkv}));
    batch.submit().wait();
    const ReferenceStages ref = reference_stages(in, options, false);
    const Comparison c = compare({s.begin(), s.end()}, ref.scores, tolerance_for(DType::f32));
    INFO(config.describe() << ": " << c.message);
    CHECK(c.ok);
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("slicing: bindings over the limit are processed in chunks", "[gpu][slicing]") {
    // A 16 KiB binding limit forces chunks over heads, then over query rows within one head.
    ContextOptions options = test_context_options();
    options.max_binding_bytes = 16 * 1024;
    Context ctx(options);
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Dk = c.Dv = 16;
    c.kv_lengths = true;
    c.bool_mask_shape = std::vector<std::int64_t>{2, 4, 0, 0};
    const auto [nq, nkv] = GENERATE(std::pair<std::int64_t, std::int64_t>{33, 47}, std::pair{100, 120});
    c.Nq = nq;
    c.Nkv = nkv;
    (*c.bool_mask_shape)[2] = nq;
    (*c.bool_mask_shape)[3] = nkv;
    c.float_mask_shape = std::vector<std::int64_t>{nq, nkv};
    c.causal = Causal::bottom_right;
    c.layout = GENERATE(Layout::bhnd, Layout::bnhd);
    c.impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    c.weights = c.impl == Impl::unfused;
    c.splits = c.impl == Impl::split ? 2 : 0;
    const CaseResult r = run_case(ctx, c, 77);
    INFO(r.message);
    CHECK(r.ok);
    CHECK(r.report.slices > 1);
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("slicing: a row too large for any slice is refused with the limit", "[gpu][slicing]") {
    // Keys and rows are sliced; a single query row of Dk = 512 floats (2048 bytes) cannot be.
    ContextOptions options = test_context_options();
    options.max_binding_bytes = 1024;
    Context ctx(options);
    Case c;
    c.Nq = 4;
    c.Nkv = 100;
    c.Dk = c.Dv = 512;
    c.impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    c.weights = c.impl == Impl::unfused;
    try {
        run_case(ctx, c, 1);
        FAIL("expected ResourceLimit");
    } catch (const ResourceLimit& e) {
        CHECK_THAT(e.what(), Catch::Contains("1024"));
    }
}

TEST_CASE("staging: the discrete-GPU transfer path", "[gpu][staging]") {
    ContextOptions options = test_context_options();
    options.force_staging = true;
    Context ctx(options);
    Case c;
    c.B = 2;
    c.Hq = 6;
    c.Hkv = 3;
    c.Nq = 19;
    c.Nkv = 37;
    c.Dk = 24;
    c.Dv = 28;
    c.layout = Layout::bnhd;
    c.dtype = GENERATE(DType::f32, DType::f16);
    const CaseResult r = run_case(ctx, c, 5);
    INFO(r.message);
    CHECK(r.ok);
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("pipeline cache: compiled pipelines persist on disk", "[gpu][cache]") {
    const auto dir = std::filesystem::temp_directory_path() / ("vkattn-cache-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    ContextOptions options = test_context_options();
    options.pipeline_cache_dir = dir.string();
    {
        Context ctx(options);
        Case c;
        c.Nq = c.Nkv = 9;
        CHECK(run_case(ctx, c, 3).ok);
    }
    REQUIRE(std::filesystem::exists(dir));
    std::uintmax_t bytes = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir)) bytes += f.file_size();
    CHECK(bytes > 0);
    {
        Context again(options);  // loads the file; must still work
        Case c;
        c.Nq = c.Nkv = 9;
        CHECK(run_case(again, c, 4).ok);
        CHECK(take_validation_messages(again).empty());
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("errors: bad arguments are refused before any GPU work", "[gpu][errors]") {
    Context& ctx = gpu_context();
    std::mt19937 rng(9);
    HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, 4, 8, 16});
    HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, 3, 8, 16});
    HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {1, 3, 8, 16});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 4, 8, 16});
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
    try {
        attention(ctx, in, {.o = o.mutable_view()});
        FAIL("expected InvalidArgument");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "k");
        CHECK_THAT(e.what(), Catch::Contains("multiple"));
    }
    CHECK(std::isnan(o.f32[0]));  // nothing was written
    HostTensor k4 = random_tensor(rng, DType::f32, Layout::bhnd, {1, 4, 8, 16});
    HostTensor v4 = random_tensor(rng, DType::f32, Layout::bhnd, {1, 4, 8, 16});
    const AttentionInputs good{.q = q.view(), .k = k4.view(), .v = v4.view()};
    std::vector<float> weights(4 * 8 * 8);
    try {
        attention(ctx, good, {.o = o.mutable_view(), .weights = weights.data()}, {.impl = Impl::fused});
        FAIL("expected InvalidArgument");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "impl");  // the weights exist only in the three-stage path
    }
    CHECK_THROWS_AS(attention(ctx, good, {.o = o.mutable_view()}, {.scale = std::nan("")}), InvalidArgument);
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("device selection: by index, by name, and a clear error otherwise", "[gpu][devices]") {
    const auto devices = list_devices();
    REQUIRE(!devices.empty());
    CHECK(std::count_if(devices.begin(), devices.end(), [](const DeviceInfo& d) { return d.default_choice; }) == 1);
    ContextOptions by_index;
    by_index.device = "0";
    CHECK(Context(by_index).device().index == 0);
    ContextOptions by_name;
    by_name.device = devices[0].name.substr(0, 4);
    CHECK(Context(by_name).device().name == devices[0].name);
    ContextOptions missing;
    missing.device = "no such device anywhere";
    try {
        Context ctx(missing);
        FAIL("expected InvalidArgument");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "device");
        CHECK_THAT(e.what(), Catch::Contains(devices[0].name));
    }
}

TEST_CASE("a fence timeout reports DeviceLost and the context refuses further work without a crash", "[gpu][lost]") {
    // The first submission reports a timeout at once while the device still runs it: a real short
    // timeout would race the work and not fire on a fast GPU.
    ContextOptions options = test_context_options();
    options.simulate_timeout_on_submission = 1;
    std::mt19937 rng(fresh_seed());
    const std::int64_t N = 2048, D = 64;
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, 4, N, D});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, 4, N, D});
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {1, 4, N, D});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 4, N, D});
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
    const AttentionOutputs out{.o = o.mutable_view()};
    const Impl impl = GENERATE(Impl::unfused, Impl::fused);
    {
        Context context(options);
        // The first request times out while the device still runs it; its buffers must outlive it.
        try {
            attention(context, in, out, {.impl = impl});
            FAIL("the simulated timeout did not fire");
        } catch (const DeviceLost& e) {
            CHECK_THAT(e.what(), Catch::Contains("simulated"));
        }
        try {
            attention(context, in, out, {.impl = impl});
            FAIL("a lost context accepted work");
        } catch (const DeviceLost& e) {
            CHECK_THAT(e.what(), Catch::Contains("refuses further work"));
        }
        CHECK_THROWS_AS(benchmark_gemm(context, 64, 64, 64, 0, 1, false), DeviceLost);
        CHECK(take_validation_messages(context).empty());
    }  // the destructor waits for the abandoned work before freeing anything
    // A fresh context works.
    Context fresh(test_context_options());
    attention(fresh, in, out, {.impl = impl});
    CHECK(std::isfinite(o.at(0, 3, N - 1, D - 1)));
}

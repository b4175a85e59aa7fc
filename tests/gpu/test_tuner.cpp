// The tuner (vkattn/tune.hpp): it times the catalogue's variants on this device, writes the winners
// beside the pipeline cache, and contexts on this device then run a bucket's winner for calls that
// force nothing; a table of another device or driver, or VKATTN_TUNING=off, leaves the heuristics.
#include "support/catch.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "support/backward_case.hpp"
#include "support/device_tuning.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/testing/attention_case.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/tune.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::test;

namespace {

// VKATTN_TUNING set for the scope (the suite's main turns it off).
struct TuningMode {
    explicit TuningMode(const char* mode) { ::setenv("VKATTN_TUNING", mode, 1); }
    ~TuningMode() { ::setenv("VKATTN_TUNING", "off", 1); }
};

struct CacheDir {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("vkattn-tuner-" + std::to_string(::getpid()));
    CacheDir() { std::filesystem::remove_all(path); }
    ~CacheDir() { std::filesystem::remove_all(path); }
};

ContextOptions options_in(const CacheDir& dir) {
    ContextOptions o = test_context_options();
    o.pipeline_cache_dir = dir.path.string();
    return o;
}

// A call of the tuned shape (bucket-mates: 400 keys is in 512's bucket), run and checked.
AttentionReport run_decode(Context& ctx, Impl impl = Impl::automatic) {
    testing::Case c;
    c.Hq = 8;
    c.Hkv = 2;
    c.Nq = 1;
    c.Nkv = 400;
    c.Dk = c.Dv = 64;
    c.causal = Causal::bottom_right;
    c.weights = false;
    c.impl = impl;
    const testing::CaseResult r = testing::run_case(ctx, c, 5);
    INFO(r.message);
    CHECK(r.ok);
    CHECK(take_validation_messages(ctx).empty());
    return r.report;
}

const TuneShape kDecode{.B = 1, .Hq = 8, .Hkv = 2, .Nq = 1, .Nkv = 512, .D = 64, .causal = true};

}  // namespace

TEST_CASE("tuner: the winners are written, loaded by the next context and run", "[gpu][tuner]") {
    const TuningMode on("on");
    const CacheDir dir;
    // The tuning's heuristics pick flash.comp here (CPU) or the decode kernel (GPUs); the tuner is
    // offered two others, so whichever wins, the tuned call differs from the heuristic one.
    const std::vector<std::string> offered{"split-flash-staged", "flash-words"};
    TuneReport report;
    {
        Context ctx(options_in(dir));
        CHECK(run_decode(ctx).chosen_by == "heuristics");  // no table yet
        report = tune(ctx, {.shapes = {kDecode}, .variants = offered, .warmup = 0, .repeat = 2});
        REQUIRE(report.results.size() == 1);
        const TuneResult& r = report.results[0];
        CHECK(r.timings.size() == 2);
        CHECK((r.winner == offered[0] || r.winner == offered[1]));
        CHECK(std::filesystem::exists(report.table_file));
        CHECK_THAT(report.table_file, Catch::Contains(ctx.device().uuid));
        // The tuning context uses its table at once.
        const AttentionReport tuned = run_decode(ctx);
        CHECK(tuned.chosen_by == "tuning");
        CHECK(tuned.path == find_kernel_variant(r.winner)->impl);
    }
    const std::string winner = report.results[0].winner;
    {
        Context ctx(options_in(dir));  // a new context finds the table beside the pipeline cache
        const AttentionReport tuned = run_decode(ctx);
        CHECK(tuned.chosen_by == "tuning");
        CHECK(tuned.path == find_kernel_variant(winner)->impl);
        CHECK(run_decode(ctx, Impl::fused).chosen_by == "caller");  // a forced path is the caller's
        // Another bucket (a prefill) has no winner: the heuristics.
        testing::Case prefill;
        prefill.Nq = prefill.Nkv = 100;
        prefill.Dk = prefill.Dv = 32;
        CHECK(testing::run_case(ctx, prefill, 6).report.chosen_by == "heuristics");
    }
    {
        const TuningMode off("off");
        Context ctx(options_in(dir));
        CHECK(run_decode(ctx).chosen_by == "heuristics");
    }
}

TEST_CASE("tuner: a table of another driver is ignored, and bad requests are refused", "[gpu][tuner]") {
    const TuningMode on("on");
    const CacheDir dir;
    Context probe(options_in(dir));
    const std::filesystem::path file = dir.path / ("tuning-" + probe.device().uuid + ".txt");
    std::filesystem::create_directories(dir.path);
    std::ofstream(file) << "vkattn tuning table 1\ndevice " << probe.device().uuid << "\ndriver another driver\n"
                        << "q=f32 k=f32 v=f32 dk=64 dv=64 causal=1 group=8 rows=8 keys=512\tflash-words\t0.1\n";
    Context ctx(options_in(dir));
    CHECK(run_decode(ctx).chosen_by == "heuristics");
    CHECK_THROWS_WITH(tune(ctx, {.shapes = {kDecode}, .variants = {"nope"}}), Catch::Contains("variants"));
    CHECK_THROWS_WITH(tune(ctx, {.shapes = {kDecode}, .repeat = 0}), Catch::Contains("repeat"));
    CHECK_THROWS_WITH(tune(ctx, {.shapes = {kDecode}, .agreement = -1}), Catch::Contains("agreement"));
}

TEST_CASE("tuner: variants with 16-bit products are timed for f16 and bf16 storage only", "[gpu][tuner][coopmat]") {
    // The cooperative-matrix kernel rounds its operands to f16 (bf16 for bf16 storage): no
    // measurement may hand it an f32 call, however fast it ran.
    const CacheDir dir;
    Context ctx(options_in(dir));
    const std::vector<std::string> offered{"tile", "coopmat"};
    TuneShape prefill{.B = 1, .Hq = 2, .Hkv = 2, .Nq = 40, .Nkv = 40, .D = 32};
    const TuneReport f32 = tune(ctx, {.shapes = {prefill}, .variants = offered, .warmup = 0, .repeat = 1, .save = false});
    REQUIRE(f32.results.size() == 1);
    CHECK(f32.results[0].timings.size() == 1);
    CHECK(f32.results[0].winner == "tile");
    if (!ctx.device().fp16_storage) return;
    prefill.dtype = DType::f16;
    const TuneReport f16 = tune(ctx, {.shapes = {prefill}, .variants = offered, .warmup = 0, .repeat = 1, .save = false});
    REQUIRE(f16.results.size() == 1);
    CHECK(f16.results[0].timings.size() == 2);
    // bf16: timed on its bf16 operands where the device runs them (portably, or units that take bf16).
    prefill.dtype = DType::bf16;
    const TuneReport bf16 = tune(ctx, {.shapes = {prefill}, .variants = offered, .warmup = 0, .repeat = 1, .save = false});
    REQUIRE(bf16.results.size() == 1);
    CHECK(bf16.results[0].timings.size() == (coopmat_bf16_runs_here() ? 2u : 1u));
    // The backward's alike: its cooperative-matrix kernels for f16 storage only.
    const std::vector<std::string> backward_offered{"backward-fused", "backward-coopmat"};
    TuneShape training{.B = 1, .Hq = 2, .Hkv = 2, .Nq = 40, .Nkv = 40, .D = 32, .backward = true};
    for (const DType dtype : {DType::f32, DType::f16}) {
        training.dtype = dtype;
        const TuneReport r = tune(ctx, {.shapes = {training}, .variants = backward_offered, .warmup = 0, .repeat = 1, .save = false});
        REQUIRE(r.results.size() == 1);
        INFO(to_string(dtype));
        CHECK(r.results[0].rejected.empty());
        CHECK(r.results[0].timings.size() == (dtype == DType::f16 ? 2u : 1u));
    }
}

TEST_CASE("tuner: a variant whose output leaves the heuristics' choice's is never the winner", "[gpu][tuner]") {
    // Every candidate runs on the same random inputs as the heuristics' choice and must agree with
    // it (TuneOptions::agreement). At the default bound every kernel here agrees. At a bound below
    // fp32's own rounding only a kernel bit-identical to the heuristics' may: the three-stage path,
    // which sums in another order than any fused kernel, is rejected with its (tiny) distance, and a
    // candidate list with no agreeing kernel is refused.
    const CacheDir dir;
    Context ctx(options_in(dir));
    const TuneShape prefill{.B = 1, .Hq = 2, .Hkv = 2, .Nq = 40, .Nkv = 70, .D = 32, .causal = true};
    const std::vector<std::string> offered{"flash-streamed", "tile", "unfused-registers"};
    const TuneReport usual = tune(ctx, {.shapes = {prefill}, .variants = offered, .warmup = 0, .repeat = 1, .save = false});
    REQUIRE(usual.results.size() == 1);
    CHECK(usual.results[0].rejected.empty());
    CHECK(usual.results[0].timings.size() == 3);

    try {
        const TuneReport strict =
            tune(ctx, {.shapes = {prefill}, .variants = offered, .warmup = 0, .repeat = 1, .save = false, .agreement = 1e-30});
        REQUIRE(strict.results.size() == 1);
        const TuneResult& r = strict.results[0];
        REQUIRE_FALSE(r.rejected.empty());
        for (const auto& [name, distance] : r.rejected) {
            INFO(name);
            CHECK(name != r.winner);
            CHECK(distance > 0.0);
            CHECK(distance < 1e-5);  // right, only not bit-identical
        }
        CHECK(std::any_of(r.rejected.begin(), r.rejected.end(), [](const auto& x) { return x.first == "unfused-registers"; }));
    } catch (const vkattn::Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("agrees"));  // no fused variant here matched the heuristics' bits
    }
    CHECK_THROWS_WITH(tune(ctx, {.shapes = {prefill}, .variants = {"unfused-registers"}, .warmup = 0, .repeat = 1,
                                 .save = false, .agreement = 1e-30}),
                      Catch::Contains("agrees"));
}

TEST_CASE("tuner: the backward's variants, timed on gradients, and its winner run by attention_backward", "[gpu][tuner][backward]") {
    const TuningMode on("on");
    const CacheDir dir;
    Context ctx(options_in(dir));
    // A training shape: the backward's catalogue (vkattn/variants.hpp) on its gradients; the f32
    // storage leaves out the cooperative-matrix kernels (16-bit products).
    const TuneShape training{.B = 1, .Hq = 2, .Hkv = 2, .Nq = 40, .Nkv = 56, .D = 32, .causal = true, .backward = true};
    const TuneReport report = tune(ctx, {.shapes = {training}, .warmup = 0, .repeat = 1});
    REQUIRE(report.results.size() == 1);
    const TuneResult& r = report.results[0];
    CHECK_THAT(r.bucket, Catch::StartsWith("backward "));
    CHECK(r.rejected.empty());
    for (const auto& [name, ms] : r.timings) {
        INFO(name);
        CHECK(find_backward_variant(name));
        CHECK(name != "backward-coopmat");
    }
    CHECK(r.timings.size() >= 2);  // the register kernels and three stages, at least
    const KernelVariant* winner = find_backward_variant(r.winner);
    REQUIRE(winner);
    // attention_backward at a bucket-mate runs the winner unforced (host and device calls), the
    // caller's choice when forced; the forward keeps its own (no forward bucket was tuned).
    testing::Case c;
    c.Hq = c.Hkv = 2;
    c.Nq = 40;
    c.Nkv = 50;
    c.Dk = c.Dv = 32;
    c.causal = Causal::bottom_right;
    std::mt19937 rng(3);
    auto values = [&](std::int64_t n) {
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> v(static_cast<std::size_t>(n));
        for (float& x : v) x = u(rng);
        return v;
    };
    const std::vector<float> q = values(2 * 40 * 32), k = values(2 * 50 * 32), v = values(2 * 50 * 32), d_o = values(2 * 40 * 32);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    const AttentionInputs in{.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, {1, 2, 40, 32}),
                             .k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, {1, 2, 50, 32}),
                             .v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, {1, 2, 50, 32})};
    const AttentionGradients grads{.dq = make_view<void*>(dq.data(), DType::f32, Layout::bhnd, {1, 2, 40, 32}),
                                   .dk = make_view<void*>(dk.data(), DType::f32, Layout::bhnd, {1, 2, 50, 32}),
                                   .dv = make_view<void*>(dv.data(), DType::f32, Layout::bhnd, {1, 2, 50, 32})};
    const TensorView grad_out = make_view<const void*>(d_o.data(), DType::f32, Layout::bhnd, {1, 2, 40, 32});
    const AttentionReport tuned = attention_backward(ctx, in, grad_out, grads, {.causal = Causal::bottom_right});
    CHECK(tuned.chosen_by == "tuning");
    CHECK(tuned.path == winner->impl);
    const AttentionReport forced =
        attention_backward(ctx, in, grad_out, grads, {.causal = Causal::bottom_right, .impl = Impl::unfused});
    CHECK(forced.chosen_by == "caller");
    CHECK(testing::run_case(ctx, c, 7).report.chosen_by == "heuristics");
    CHECK(take_validation_messages(ctx).empty());
    {
        const TuningMode off("off");
        Context plain(options_in(dir));
        CHECK(attention_backward(plain, in, grad_out, grads, {.causal = Causal::bottom_right}).chosen_by == "heuristics");
    }
}

TEST_CASE("tuner: a backward winner its bucket-mate cannot run leaves the heuristics' choice", "[gpu][tuner][backward]") {
    // A bucket spans lengths 8× apart (and "more" past 32,768 keys): the fused backward's winner at a
    // short length meets a long one past the loop budget (lavapipe's 65,535, imposed here), where its
    // plan refuses; the call must run the heuristics' three stages rather than fail.
    const TuningMode on("on");
    const CacheDir dir;
    ContextOptions limited = options_in(dir);
    limited.max_loop_iterations = 65535;
    {
        Context probe(limited);
        std::filesystem::create_directories(dir.path);
        std::ofstream(dir.path / ("tuning-" + probe.device().uuid + ".txt"))
            << "vkattn tuning table 2\ndevice " << probe.device().uuid << "\ndriver " << probe.device().driver << "\n"
            << "backward q=f32 k=f32 v=f32 dk=64 dv=64 causal=1 group=8 rows=8 keys=more\tbackward-fused\t0.1\n";
    }
    Context ctx(limited);
    const BackwardCase c = long_keys_case("long keys, tuned");
    const Inputs in(c, 7710);
    Gradients ref = gradients_like(in, c), gpu = gradients_like(in, c);
    reference_attention_backward(in.in, in.grad_out.view(), views(ref, false), c.options);
    const AttentionReport r = attention_backward(ctx, in.in, in.grad_out.view(), views(gpu, false), c.options);
    CHECK(r.path == Impl::unfused);
    CHECK(r.chosen_by == "heuristics");
    expect_close(gpu, ref, testing::gradient_tolerance_for(c.dtype));
    // The same bucket at a length the winner can run takes it.
    BackwardCase shorter = c;
    shorter.Nkv = 40000;
    const Inputs short_in(shorter, 7711);
    Gradients short_gpu = gradients_like(short_in, shorter);
    const AttentionReport tuned = attention_backward(ctx, short_in.in, short_in.grad_out.view(), views(short_gpu, false), shorter.options);
    CHECK(tuned.chosen_by == "tuning");
    CHECK(tuned.path == Impl::fused);
    CHECK(take_validation_messages(ctx).empty());
}

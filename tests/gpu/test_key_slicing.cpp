// Keys beyond one binding: K and V of one head larger than maxStorageBufferRange (as a long KV cache
// is on any device) are bound in key slices and merged exactly, never refused. The binding limit is
// lowered through ContextOptions::max_binding_bytes so that every slicing decision is reached with
// small tensors: fused and split-KV bind a few splits at a time and merge them in combine.comp; the
// three-stage path runs stages 1 and 3 per key slice (P·V accumulated over the slices) and stage 2
// on whole rows, or in two passes over the slices when one row of scores exceeds a binding.
#include "support/catch.hpp"

#include <cstring>
#include <functional>
#include <optional>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/testing/attention_case.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::test;

namespace {

Context limited_context(std::uint64_t max_binding_bytes) {
    ContextOptions options = test_context_options();
    options.max_binding_bytes = max_binding_bytes;
    return Context(options);
}

// Every mask and model feature, each on its own; run_case compares o, lse (and the weights and
// logits) with the reference. by_key_index: the feature's terms follow from a key's index alone
// (no tensor is sliced with K for it), so the key offset a slice passes is all it tests.
struct Feature {
    const char* name;
    std::function<void(Case&)> apply;
    bool by_key_index = true;
};

const std::vector<Feature>& features() {
    static const std::vector<Feature> all{
        {"plain", [](Case&) {}, false},
        {"bottom-right causal, key lengths", [](Case& c) {
             c.causal = Causal::bottom_right;
             c.kv_lengths = true;
         }},
        {"bool and float masks", [](Case& c) {
             c.bool_mask_shape = std::vector<std::int64_t>{c.B, 1, c.Nq, c.Nkv};
             c.float_mask_shape = std::vector<std::int64_t>{c.Nq, c.Nkv};
         },
         false},
        {"window, top-left causal offset, softcap", [](Case& c) {
             c.causal_offset = 300;
             c.window = {.left = 250, .right = -1};
             c.softcap = 5.0;
         }},
        {"ALiBi and sinks", [](Case& c) {
             c.alibi_max_bias = 8.0;
             c.sinks = true;
         }},
        {"dropout", [](Case& c) {
             c.dropout = 0.2;
             c.dropout_seed = 7;
         }},
    };
    return all;
}

Case long_keys(Impl impl, DType dtype, std::int64_t nkv) {
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = 37;
    c.Nkv = nkv;
    c.Dk = c.Dv = 16;
    c.dtype = dtype;
    c.layout = Layout::bnhd;
    c.impl = impl;
    c.weights = impl == Impl::unfused;
    c.splits = impl == Impl::split ? 4 : 0;
    return c;
}

}  // namespace

TEST_CASE("key slicing: every path and feature with K and V beyond one binding", "[gpu][slicing][keys]") {
    // 8 KiB: one head's K (701 keys x 16 x 4 bytes = 44 KiB) takes at least six bindings; one fused
    // key block (64 keys, 4 KiB) still fits. 2 KiB: one row of scores (2.8 KiB) no longer fits, so
    // the three-stage softmax runs in two passes.
    struct Setup {
        Impl impl;
        std::uint64_t limit;
        const char* expect;
        std::optional<FusedKernel> kernel;  // the fused kernel forced (decode: split runs)
    };
    const Setup setup = GENERATE(Setup{Impl::fused, 8192, "key-slices="}, Setup{Impl::split, 8192, "key-slices="},
                                 Setup{Impl::split, 8192, "key-slices=", FusedKernel::decode},
                                 Setup{Impl::fused, 8192, "key-slices=", FusedKernel::tile},
                                 Setup{Impl::fused, 8192, "key-slices=", FusedKernel::coopmat},
                                 Setup{Impl::unfused, 8192, "key-slices="}, Setup{Impl::unfused, 2048, "two-pass"});
    const DType dtype = GENERATE(DType::f32, DType::f16);
    // 700 keys: P rows are 4-aligned, so stage 3 reads key slices of P as texels.
    const std::int64_t nkv = setup.impl == Impl::unfused ? GENERATE(701, 700) : 701;
    Context ctx = limited_context(setup.limit);
    std::size_t index = 0;
    // The GPU-shaped kernels (tile, coopmat) are lavapipe's slowest in key slices (11 slices of
    // 64 keys in f32, 4-9 s a case, about 4x f16's): in f32 they take the features that slice a tensor
    // with K (plain K/V, the masks), and the key-index features once, in f16, whose loads differ
    // (coopmat: 16-byte chunks where f32 goes through the typed loaders) while the key offsets are
    // the same.
    const bool gpu_shaped = setup.kernel == FusedKernel::tile || setup.kernel == FusedKernel::coopmat;
    for (const Feature& f : features()) {
        if (gpu_shaped && dtype == DType::f32 && f.by_key_index) continue;
        Case c = long_keys(setup.impl, dtype, nkv);
        c.variant.fused_kernel = setup.kernel;
        // The logits are written beside P, slice by slice: the masked stage (softcapped where there is
        // a softcap, scaled once), every other case without the weights (S then lives in scratch).
        if (setup.impl == Impl::unfused) {
            c.logits = index == 0 ? LogitsStage::scaled : LogitsStage::masked;
            c.weights = index++ % 2 == 1;
        }
        if (setup.limit < 4096) {  // one score row per chunk: keep the chunks few
            c.B = 1;
            c.Hq = 2;
            c.Hkv = 1;
            c.Nq = 5;
        }
        f.apply(c);
        if (c.softcap && c.logits) c.logits = LogitsStage::softcapped;
        const CaseResult r = run_case(ctx, c, 1234);
        INFO(f.name << ": " << r.message);
        CHECK(r.ok);
        CHECK(r.report.path == setup.impl);
        CHECK_THAT(r.report.variant, Catch::Contains(setup.expect));
        if (setup.kernel) CHECK_THAT(r.report.variant, Catch::StartsWith(to_string(*setup.kernel) + "["));
        CHECK(take_validation_messages(ctx).empty());
    }
}

TEST_CASE("key slicing: split-KV bound a few splits at a time is bit-identical to one binding",
          "[gpu][slicing][keys]") {
    // The same splits (and so the same arithmetic) whether they share one binding or not.
    Case c = long_keys(Impl::split, GENERATE(DType::f32, DType::f16), 701);
    const bool decode = GENERATE(false, true);  // flash.comp's split run, or the decode kernel's
    c.splits = 8;
    c.causal = Causal::bottom_right;
    c.sinks = true;
    std::mt19937 rng(99);
    HostTensor q = random_tensor(rng, c.dtype, c.layout, {c.B, c.Hq, c.Nq, c.Dk}, 1.0f);
    HostTensor k = random_tensor(rng, c.dtype, c.layout, {c.B, c.Hkv, c.Nkv, c.Dk}, 1.0f);
    HostTensor v = random_tensor(rng, c.dtype, c.layout, {c.B, c.Hkv, c.Nkv, c.Dv}, 1.0f);
    const std::vector<float> sinks{0.5f, -1.0f, 2.0f, 0.0f};
    AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .sinks = sinks};
    AttentionOptions options{.causal = c.causal, .impl = Impl::split, .variant = {.fused_kernel = decode ? FusedKernel::decode : FusedKernel::flash},
                             .splits = c.splits};

    auto run = [&](Context& ctx, std::vector<float>& lse) {
        HostTensor o = nan_tensor(c.dtype, c.layout, {c.B, c.Hq, c.Nq, c.Dv});
        lse.assign(static_cast<std::size_t>(c.B * c.Hq * c.Nq), 0.0f);
        const AttentionReport report = attention(ctx, in, {.o = o.mutable_view(), .lse = lse.data()}, options);
        CHECK(take_validation_messages(ctx).empty());
        return std::pair{std::move(o), report};
    };
    std::vector<float> lse_whole, lse_sliced;
    auto [o_whole, whole] = run(gpu_context(), lse_whole);
    Context limited = limited_context(16384);  // 128-key splits fit one at a time, not two
    auto [o_sliced, sliced] = run(limited, lse_sliced);
    INFO(whole.variant << " vs " << sliced.variant);
    CHECK_THAT(sliced.variant, Catch::Contains("key-slices="));
    CHECK_THAT(whole.variant, !Catch::Contains("key-slices="));
    CHECK(o_whole.f32 == o_sliced.f32);
    CHECK(o_whole.f16 == o_sliced.f16);
    CHECK(std::memcmp(lse_whole.data(), lse_sliced.data(), lse_whole.size() * 4) == 0);
}

TEST_CASE("key slicing: one head of 600,000 keys past a 128 MiB binding limit", "[gpu][slicing][keys]") {
    // K and V of one head are 153.6 MB each (as large as a 128k-token cache of several heads), over
    // lavapipe's own 128 MiB maxStorageBufferRange: decoding runs on every path, in key slices. A
    // device whose bindings take the head whole (4 GiB on an NVIDIA H200) is given lavapipe's limit
    // through max_binding_bytes, so the slices are made and tested on every device.
    constexpr std::uint64_t kLimit = 128ull << 20;
    Case c;
    c.Nq = 3;
    c.Nkv = 600000;
    c.Dk = c.Dv = 64;
    c.causal = Causal::bottom_right;
    c.impl = GENERATE(Impl::automatic, Impl::fused, Impl::unfused);
    c.weights = c.impl == Impl::unfused;
    const bool own_limit = gpu_context().device().max_storage_buffer_range <= kLimit;
    std::optional<Context> limited;
    if (!own_limit) limited.emplace(limited_context(kLimit));
    Context& ctx = own_limit ? gpu_context() : *limited;
    const CaseResult r = run_case(ctx, c, 600000);
    INFO(r.message);
    CHECK(r.ok);
    CHECK_THAT(r.report.variant, Catch::Contains("key-slices="));
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("key slicing: the forced GPU kernels keep lavapipe's loop budget over 40,000 keys", "[gpu][slicing][keys]") {
    // lavapipe ends a shader's loops silently once an invocation has taken 65,535 back-edges
    // (docs/LAVAPIPE.md): each kernel's loops per key tile (e.g. coopmat_loops_per_tile) must count
    // every loop its shader keeps, or a long head runs past the budget with wrong results. 40,000
    // keys of 32-key tiles take ~1,250 tiles: several budgets' worth on lavapipe. (A GPU has no such
    // budget; the case is cheap there.)
    // The workgroup-matrix kernel (f16 K/V alone) through its portable twin where the driver offers
    // no workgroup matrices: workgroup_matrix_loops_per_tile counts its loops.
    const FusedKernel kernel = GENERATE(FusedKernel::tile, FusedKernel::coopmat);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const bool workgroup = GENERATE(false, true);
    if (workgroup && (kernel != FusedKernel::coopmat || dtype != DType::f16)) return;
    Case c;
    c.Nq = 16;
    c.Nkv = 40000;
    c.Dk = c.Dv = 16;
    c.dtype = dtype;
    c.impl = Impl::fused;
    c.weights = false;
    c.variant.fused_kernel = kernel;
    if (workgroup) c.variant.workgroup_matrices = true;
    const CaseResult r = run_case(gpu_context(), c, 40000);
    INFO(to_string(kernel) << (workgroup ? " workgroup " : " ") << r.message << " " << r.report.variant);
    CHECK(r.ok);
    CHECK_THAT(r.report.variant, Catch::StartsWith(to_string(kernel) + "["));
    if (workgroup) CHECK_THAT(r.report.variant, Catch::Contains(" workgroup"));
    CHECK(take_validation_messages(gpu_context()).empty());
}

// Storage types (issue #17): bf16 for q, k, v and o, ggml's quantized blocks and fp8 for k and v, read
// by every path. The kernels decode as they load and dequantization is exact, so each case is held to
// its output dtype's tolerance against the reference run on the values the tensors stand for
// (vkattn/quantize.hpp's decoding, itself checked against ggml's own in [quantize]). Outputs start
// as NaN.
#include "support/catch.hpp"

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/quantize.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using vkattn::test::gpu_context;
using vkattn::test::take_validation_messages;

namespace {

constexpr Impl kPaths[] = {Impl::unfused, Impl::fused, Impl::split};

Case shaped(DType q, DType k, DType v, Impl impl) {
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = 19;
    c.Nkv = 101;
    c.Dk = 64;
    c.Dv = 32;
    c.dtype = q;
    c.k_dtype = k;
    c.v_dtype = v;
    c.impl = impl;
    c.splits = impl == Impl::split ? 3 : 0;
    c.weights = impl == Impl::unfused;
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;
    return c;
}

}  // namespace

TEST_CASE("bf16 q, k, v and o on every path and layout", "[storage_types]") {
    for (const Impl impl : kPaths)
        for (const Layout layout : {Layout::bhnd, Layout::bnhd}) {
            Case c = shaped(DType::bf16, DType::bf16, DType::bf16, impl);
            c.Dk = 40;  // not a multiple of the vec4 or of a block: the word loads' odd elements
            c.Dv = 27;
            c.layout = layout;
            c.sinks = true;
            c.softcap = 20.0;
            const AttentionReport report = vkattn::test::expect_pass(c, impl);
            CHECK_THAT(report.variant, Catch::Contains("words"));  // bf16 is never a texel format
        }
}

// Each distinct set of types is a pipeline of its own, compiled at its first dispatch (seconds on
// lavapipe): the types go in pairs, each type once as K and once as V over the two tests below.
TEST_CASE("ggml's quantized K and V on every path", "[storage_types]") {
    const std::pair<DType, DType> pairs[] = {{DType::q8_0, DType::q4_0}, {DType::q4_1, DType::q5_0}, {DType::q5_1, DType::iq4_nl}};
    for (const auto& [k, v] : pairs)
        for (const Impl impl : kPaths) {
            Case c = shaped(DType::f32, k, v, impl);
            c.window = {30, -1};
            vkattn::test::expect_pass(c, impl);
        }
}

// The streamed kernels walk the blocks a block at a time (flash.comp): K's blocks are fetched whole,
// and with 4 output slots per lane (Dv = 16·SG: 128 on 8-lane subgroups, 512 on 32) each lane owns
// 16 consecutive columns and reads half a V block per key. Dv = 16·SG + 32 takes two column passes,
// the second with lanes past Dv; the fused kernel's 512 columns hold it only below 32 lanes. Every
// type as K and as V, blocks of both alignments (34-, 18- and 22-byte blocks start mid-word every
// other block), rows that are not a multiple of the row or key tiles; the split runs read
// storage-buffer words, the fused ones texel views of them. The walk is the streamed kernel's, so
// it is forced: GPUs would otherwise stage K and V in shared memory.
TEST_CASE("ggml's blocks walked a block at a time: wide K and V heads", "[storage_types]") {
    const std::int64_t sg = vkattn::test::fused_config(shaped(DType::f32, DType::q8_0, DType::q4_0, Impl::fused)).subgroup;
    const bool two_passes = 16 * sg + 32 <= 512;
    if (!two_passes)
        WARN("two column passes of ggml blocks not run: they need Dv = " << 16 * sg + 32 << " on " << sg
             << "-lane subgroups, past the fused kernel's 512");
    const std::pair<DType, DType> pairs[] = {{DType::q8_0, DType::q4_0}, {DType::q4_1, DType::q5_0}, {DType::q5_1, DType::iq4_nl}};
    for (const auto& [a, b] : pairs)
        for (const Impl impl : {Impl::fused, Impl::split}) {
            const bool swapped = impl == Impl::split;
            if (swapped && !two_passes) continue;
            Case c = shaped(DType::f32, swapped ? b : a, swapped ? a : b, impl);
            c.Dk = 96;
            c.Dv = swapped ? 16 * sg + 32 : 16 * sg;
            c.Nkv = 77;
            c.variant.shared_tiles = false;
            c.variant.texel_loads = !swapped;
            const AttentionReport report = vkattn::test::expect_pass(c, impl);
            CHECK_THAT(report.variant, Catch::Contains(swapped ? "fused[words" : "fused[texel-words") &&
                                           Catch::Contains(" streamed") && Catch::Contains(" dv4=4"));
            if (swapped) CHECK_THAT(report.variant, Catch::Contains(" passes=2"));
        }
}

// fp8 with vLLM's scales: per head here (random, in [0.25, 4]), per tensor in the test below. The
// kernels multiply each decoded byte by its head's scale as they load, as the reference does.
TEST_CASE("fp8 K and V with per-head scales on every path", "[storage_types]") {
    for (const Impl impl : kPaths) {
        Case c = shaped(DType::f32, DType::fp8_e4m3, DType::fp8_e5m2, impl);
        c.Dk = 36;  // not a multiple of the vec4's bytes: loads straddle words
        c.Dv = 21;
        c.layout = impl == Impl::fused ? Layout::bnhd : Layout::bhnd;
        c.kv_scales = true;
        c.alibi_slopes = true;  // the scales sit behind the slopes and sinks in the head terms
        c.sinks = true;
        const AttentionReport report = vkattn::test::expect_pass(c, impl);
        CHECK_THAT(report.variant, Catch::Contains("words"));
    }
}

TEST_CASE("fp8 with one scale for the tensor, the other fp8 type as K, and the scales' errors", "[storage_types]") {
    Context& ctx = gpu_context();
    std::mt19937 rng(808);
    const std::int64_t Hq = 4, Hkv = 2, Nkv = 45, D = 32;
    const float k_scale[] = {0.125f}, v_scale[] = {3.0f};
    const HostTensor q = random_tensor(rng, DType::bf16, Layout::bhnd, {1, Hq, 1, D});
    const HostTensor k = random_tensor(rng, DType::fp8_e5m2, Layout::bhnd, {1, Hkv, Nkv, D}, 1.0f, std::vector<float>(Hkv, k_scale[0]));
    const HostTensor v = random_tensor(rng, DType::fp8_e4m3, Layout::bhnd, {1, Hkv, Nkv, D}, 1.0f, std::vector<float>(Hkv, v_scale[0]));
    for (const Impl impl : {Impl::fused, Impl::split}) {
        HostTensor o = nan_tensor(DType::bf16, Layout::bhnd, {1, Hq, 1, D});
        const AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .k_scale = k_scale, .v_scale = v_scale};
        const AttentionOptions options{.impl = impl, .splits = impl == Impl::split ? 3u : 0u};
        attention(ctx, in, {.o = o.mutable_view()}, options);
        const ReferenceStages ref = reference_stages(in, options, false);
        std::vector<double> g;
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t d = 0; d < D; ++d) g.push_back(o.at(0, h, 0, d));
        const Comparison cmp = compare(g, ref.output, tolerance_for(DType::bf16));
        INFO(to_string(impl) << ": " << cmp.message);
        CHECK(cmp.ok);
        // The scale is the tensor's: without it the result is another one.
        const ReferenceStages unscaled = reference_stages({.q = q.view(), .k = k.view(), .v = v.view()}, options, false);
        CHECK_FALSE(compare(g, unscaled.output, tolerance_for(DType::bf16)).ok);
    }
    auto refused = [&](AttentionInputs in, const char* name, const char* words) {
        HostTensor o = nan_tensor(DType::bf16, Layout::bhnd, {1, Hq, 1, D});
        try {
            attention(ctx, in, {.o = o.mutable_view()});
            FAIL("accepted");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == name);
            CHECK_THAT(e.what(), Catch::Contains(words));
        }
    };
    const float three[] = {1.0f, 2.0f, 3.0f}, negative[] = {-1.0f};
    refused({.q = q.view(), .k = k.view(), .v = v.view(), .k_scale = three}, "k_scale", "give 1 (the tensor's) or Hkv = 2");
    refused({.q = q.view(), .k = k.view(), .v = v.view(), .v_scale = negative}, "v_scale", "finite number above 0");
    const HostTensor v16 = random_tensor(rng, DType::bf16, Layout::bhnd, {1, Hkv, Nkv, D});
    refused({.q = q.view(), .k = k.view(), .v = v16.view(), .v_scale = v_scale}, "v_scale", "fp8 v only; v is bf16");
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("K and V of other storage types than q's, through texel views or words", "[storage_types]") {
    // q f16 and bf16 over block types (every block type as V and as K, with the test above), and the
    // float mixes. The block types read words here (their texel views: the test above, by default);
    // f32 with f16 reads float texels, and bf16 among them makes every operand a texel of words.
    const std::tuple<DType, DType, DType> sets[] = {{DType::f16, DType::q4_0, DType::q8_0}, {DType::bf16, DType::q5_0, DType::q4_1},
                                                    {DType::bf16, DType::iq4_nl, DType::q5_1}, {DType::f32, DType::f32, DType::f16},
                                                    {DType::f16, DType::bf16, DType::f16}};
    for (const auto& [q, k, v] : sets)
        for (const Impl impl : {Impl::fused, Impl::split}) {  // the three-stage path: the test above
            Case c = shaped(q, k, v, impl);
            c.layout = q == DType::f16 ? Layout::bnhd : Layout::bhnd;
            c.Hq = 6;
            c.Hkv = 3;
            c.Nq = 1;  // decode: one query row per head
            const bool words = is_block_type(k) || is_block_type(v);
            c.variant.texel_loads = !words;
            const AttentionReport report = vkattn::test::expect_pass(c, impl);
            const bool float_texels = q == DType::f32 && k == DType::f32 && v == DType::f16;
            CHECK_THAT(report.variant, Catch::Contains(words ? "fused[words" : float_texels ? "fused[texel " : "fused[texel-words"));
        }
}

// The texel-words variant fetches the word loads' words through R32_UINT views and knows its rows
// start on 4 elements (whole-word reads of bf16 and fp8, q4_1's and q5_1's aligned words): the same
// values, so the same result bit for bit.
TEST_CASE("texel views of words give the word loads' result bit for bit", "[storage_types]") {
    Context& ctx = gpu_context();
    std::mt19937 rng(2211);
    const std::tuple<DType, DType, DType> sets[] = {{DType::f16, DType::bf16, DType::q5_1}, {DType::f32, DType::q8_0, DType::fp8_e4m3}};
    const float v_scale[] = {0.5f};
    for (const auto& [qt, kt, vt] : sets) {
        const HostTensor q = random_tensor(rng, qt, Layout::bhnd, {1, 4, 3, 64});
        const HostTensor k = random_tensor(rng, kt, Layout::bhnd, {1, 2, 150, 64});
        const HostTensor v = random_tensor(rng, vt, Layout::bhnd, {1, 2, 150, 32}, 1.0f,
                                           is_fp8(vt) ? std::vector<float>(2, v_scale[0]) : std::vector<float>{});
        const AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(),
                                 .v_scale = is_fp8(vt) ? std::span<const float>(v_scale) : std::span<const float>{}};
        std::vector<HostTensor> outs;
        for (const bool texel : {true, false}) {
            outs.push_back(nan_tensor(qt, Layout::bhnd, {1, 4, 3, 32}));
            AttentionOptions options{.impl = Impl::split, .splits = 3};
            options.variant.texel_loads = texel;
            const AttentionReport r = attention(ctx, in, {.o = outs.back().mutable_view()}, options);
            CHECK_THAT(r.variant, Catch::Contains(texel ? "fused[texel-words" : "fused[words"));
        }
        INFO(to_string(kt) << " " << to_string(vt));
        CHECK(outs[0].f32 == outs[1].f32);
        CHECK(outs[0].f16 == outs[1].f16);
        std::vector<double> got;
        for (std::int64_t h = 0; h < 4; ++h)
            for (std::int64_t n = 0; n < 3; ++n)
                for (std::int64_t d = 0; d < 32; ++d) got.push_back(outs[0].at(0, h, n, d));
        const Comparison cmp = compare(got, reference_stages(in, {}, false).output, tolerance_for(qt));
        INFO(cmp.message);
        CHECK(cmp.ok);
    }
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("f32 and f16 read as words give the texel loads' result bit for bit", "[storage_types]") {
    Context& ctx = gpu_context();
    std::mt19937 rng(1707);
    for (const DType dtype : {DType::f32, DType::f16})
        for (const Impl impl : {Impl::fused, Impl::split}) {
            const HostTensor q = random_tensor(rng, dtype, Layout::bhnd, {1, 4, 33, 64});
            const HostTensor k = random_tensor(rng, dtype, Layout::bhnd, {1, 2, 150, 64});
            const HostTensor v = random_tensor(rng, dtype, Layout::bhnd, {1, 2, 150, 48});
            std::vector<HostTensor> outs;
            for (const bool texel : {true, false}) {
                outs.push_back(nan_tensor(dtype, Layout::bhnd, {1, 4, 33, 48}));
                AttentionOptions options{.causal = Causal::top_left, .impl = impl, .splits = impl == Impl::split ? 2u : 0u};
                options.variant.texel_loads = texel;
                const AttentionReport r = attention(ctx, {.q = q.view(), .k = k.view(), .v = v.view()},
                                                    {.o = outs.back().mutable_view()}, options);
                CHECK_THAT(r.variant, Catch::Contains(texel ? "texel" : "words"));
            }
            INFO(to_string(dtype) << " " << to_string(impl));
            CHECK(outs[0].f32 == outs[1].f32);
            CHECK(outs[0].f16 == outs[1].f16);
        }
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("quantized device tensors: uploads, views and a plan", "[storage_types]") {
    Context& ctx = gpu_context();
    std::mt19937 rng(4242);
    const std::int64_t B = 1, Hq = 4, Hkv = 2, Nkv = 70, D = 64;
    const HostTensor q = random_tensor(rng, DType::f16, Layout::bnhd, {B, Hq, 5, D});
    const HostTensor k = random_tensor(rng, DType::q4_0, Layout::bnhd, {B, Hkv, Nkv, D});
    const HostTensor v = random_tensor(rng, DType::q8_0, Layout::bnhd, {B, Hkv, Nkv, D});
    const DeviceTensor dk = DeviceTensor::from_host(ctx, k.view(), Layout::bnhd);
    const DeviceTensor dv = DeviceTensor::from_host(ctx, v.view(), Layout::bhnd);  // another layout on the device
    // Keys 3..69 through views that start inside the memory (on a block: rows are whole blocks).
    const DeviceTensor k_view = dk.seq(3, Nkv - 3), v_view = dv.seq(3, Nkv - 3);
    const DeviceTensor dq = DeviceTensor::from_host(ctx, q.view());
    const DeviceTensor o = DeviceTensor::empty(ctx, DType::f16, {B, Hq, 5, D});
    for (const Impl impl : kPaths) {
        const AttentionOptions options{.causal = Causal::bottom_right, .impl = impl};
        const AttentionPlan plan(ctx, {.q = dq, .k = k_view, .v = v_view}, {.o = o}, options);
        Batch batch(ctx);
        batch.fill(o, 0x7e007e00u);  // NaN
        plan.run(batch, {.q = dq, .k = k_view, .v = v_view}, {.o = o});
        batch.submit().wait();
        HostTensor got = nan_tensor(DType::f16, Layout::bhnd, {B, Hq, 5, D});
        o.download(got.mutable_view());

        // The reference over the same keys: the host blocks from row 3 on.
        TensorView kr = k.view(), vr = v.view();
        kr.shape[2] = vr.shape[2] = Nkv - 3;
        kr.data = static_cast<const std::uint8_t*>(k.view().data) + storage_bytes(DType::q4_0, 3 * k.view().strides[2]);
        vr.data = static_cast<const std::uint8_t*>(v.view().data) + storage_bytes(DType::q8_0, 3 * v.view().strides[2]);
        const ReferenceStages ref = reference_stages({.q = q.view(), .k = kr, .v = vr}, options, false);
        std::vector<double> g;
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t i = 0; i < 5; ++i)
                for (std::int64_t d = 0; d < D; ++d) g.push_back(got.at(0, h, i, d));
        const Comparison cmp = compare(g, ref.output, tolerance_for(DType::f16));
        INFO(to_string(impl) << ": " << cmp.message << " [" << plan.report().variant << "]");
        CHECK(cmp.ok);
    }
    // The bytes come back as they went.
    HostTensor back = k;
    std::fill(back.bytes.begin(), back.bytes.end(), 0);
    dk.download(back.mutable_view());
    CHECK(back.bytes == k.bytes);
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("storage types: what cannot be stored so is refused, naming the argument", "[storage_types][errors]") {
    Context& ctx = gpu_context();
    std::mt19937 rng(99);
    auto refused = [&](TensorView q, TensorView k, TensorView v, MutableTensorView o, const char* name, const char* words) {
        try {
            attention(ctx, {.q = q, .k = k, .v = v}, {.o = o});
            FAIL("accepted");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == name);
            CHECK_THAT(e.what(), Catch::Contains(words));
        }
    };
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 3, 64});
    const HostTensor k = random_tensor(rng, DType::q8_0, Layout::bhnd, {1, 2, 9, 64});
    const HostTensor v = random_tensor(rng, DType::q4_0, Layout::bhnd, {1, 2, 9, 64});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 3, 64});
    HostTensor o16 = nan_tensor(DType::bf16, Layout::bhnd, {1, 2, 3, 64});
    // q of a block type; o of another dtype than q; k of an integer type.
    refused(k.view(), k.view(), v.view(), o.mutable_view(), "q", "q and o are f32, f16 or bf16");
    refused(q.view(), k.view(), v.view(), o16.mutable_view(), "o", "o has q's dtype");
    TensorView ints = q.view();
    ints.dtype = DType::i32;
    refused(q.view(), ints, v.view(), o.mutable_view(), "k", "k and v are float");
    // A block type's head dimension is whole blocks.
    const HostTensor q40 = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 3, 40});
    HostTensor o40 = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 3, 40});
    TensorView k40 = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 9, 40}).view();
    k40.dtype = DType::q8_0;  // never read: refused first
    refused(q40.view(), k40, q40.view(), o40.mutable_view(), "k", "multiple of 32");
    CHECK_THROWS_AS(DeviceTensor::empty(ctx, DType::q5_1, {1, 1, 4, 48}), InvalidArgument);
    const DeviceTensor dk = DeviceTensor::empty(ctx, DType::q8_0, {1, 2, 9, 64});
    TensorView strided = k.view();
    strided.strides = {2 * 9 * 80, 9 * 80, 80, 1};  // rows 80 elements apart: not on blocks
    try {
        dk.upload(strided);
        FAIL("accepted");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "from");
        CHECK_THAT(e.what(), Catch::Contains("start on a block of 32"));
    }
    CHECK(take_validation_messages(ctx).empty());
}

// The GPU decode kernel (flash_decode.comp, issue #31), forced on the suite's device so that lavapipe
// runs it too: every storage type, head shapes that are not multiples of its chunks or lanes, GQA
// ratios, every mask and feature, key counts from 1 to 100,000, both load widths, split counts, and
// the tuning's rules. Outputs are NaN-poisoned and compared with the CPU reference by run_case.
#include "support/catch.hpp"

#include <string>

#include "attention/decode.hpp"
#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"

using namespace vkattn;
using namespace vkattn::test;
using testing::Case;

namespace {

// A decode step: Nq query rows per head over Nkv keys, the decode kernel forced.
Case decode_case(std::int64_t Hq, std::int64_t Hkv, std::int64_t Nkv, std::int64_t D, DType dtype) {
    Case c;
    c.B = 2;
    c.Hq = Hq;
    c.Hkv = Hkv;
    c.Nq = 1;
    c.Nkv = Nkv;
    c.Dk = c.Dv = D;
    c.dtype = dtype;
    c.weights = false;
    c.impl = Impl::split;
    c.variant.fused_kernel = FusedKernel::decode;
    return c;
}

// Runs c and checks that the decode kernel ran.
AttentionReport expect_decode(const Case& c) {
    const AttentionReport r = expect_pass(c, Impl::split);
    CHECK_THAT(r.variant, Catch::StartsWith("decode["));
    return r;
}

}  // namespace

// Each distinct layout and type set is a pipeline, and lavapipe compiles one in ~3 s: the cases are
// chosen to cover the kernel's branches with few of them (key counts and split counts are free).

TEST_CASE("decode kernel: every K/V storage type", "[gpu][decode][storage_types]") {
    const DType kv = GENERATE(DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                              DType::q5_1, DType::iq4_nl, DType::fp8_e4m3, DType::fp8_e5m2);
    // Q f16 with the 16-bit K/V types (the GPU's usual step), f32 with the others.
    const bool half_q = (kv == DType::f16 || kv == DType::bf16) && device_caps().fp16_storage;
    Case c = decode_case(8, 2, 333, 64, half_q ? DType::f16 : DType::f32);
    c.k_dtype = c.v_dtype = kv;
    c.kv_scales = is_fp8(kv);
    c.kv_lengths = true;
    INFO(to_string(kv));
    expect_decode(c);
    // K and V of different types (each has its own chunks): a block K with an fp8 V, and back.
    if (kv == DType::q4_1 || kv == DType::fp8_e4m3) {
        c.v_dtype = kv == DType::q4_1 ? DType::fp8_e5m2 : DType::q5_0;
        c.kv_scales = true;
        expect_decode(c);
    }
}

TEST_CASE("decode kernel: head shapes, GQA ratios and key counts", "[gpu][decode]") {
    struct Shape {
        std::int64_t hq, hkv, d;
        DType dtype;
    };
    // One row (MHA); 7 rows in 8 row slots; 12 rows in two row blocks; 8 rows. Heads of 8 (one lane
    // per key), 40 and 80 (lanes whose chunks lie past the row), 128, and 256 (more lanes per key
    // than an 8-lane subgroup has). Partial chunks and word loads: the Dk ≠ Dv case below.
    const Shape shape = GENERATE(Shape{1, 1, 8, DType::f32}, Shape{7, 1, 40, DType::f16}, Shape{12, 1, 80, DType::f32},
                                 Shape{16, 2, 128, DType::f16}, Shape{4, 4, 256, DType::f32}, Shape{8, 1, 40, DType::f32});
    const std::int64_t nkv = GENERATE(1, 5, 777);
    Case c = decode_case(shape.hq, shape.hkv, nkv, shape.d, shape.dtype);
    if (!device_caps().fp16_storage) c.dtype = DType::f32;
    c.causal = Causal::bottom_right;
    INFO("Hq " << shape.hq << " Hkv " << shape.hkv << " D " << shape.d << " " << to_string(c.dtype) << " keys " << nkv);
    expect_decode(c);
}

TEST_CASE("decode kernel: Dk ≠ Dv, several queries, interleaved heads, split counts", "[gpu][decode]") {
    struct Shape {
        std::int64_t dk, dv, nq;
    };
    const Shape shape = GENERATE(Shape{72, 40, 1}, Shape{36, 128, 3}, Shape{128, 8, 1});
    const std::uint32_t splits = GENERATE(1u, 3u, 0u);
    const Layout layout = GENERATE(Layout::bhnd, Layout::bnhd);
    Case c = decode_case(8, 2, 301, shape.dk, DType::f16);
    if (!device_caps().fp16_storage) c.dtype = DType::f32;
    c.Dv = shape.dv;
    c.Nq = shape.nq;
    c.splits = splits;
    c.layout = layout;
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;
    const AttentionReport r = expect_decode(c);
    if (splits > 0) CHECK_THAT(r.variant, Catch::Contains(" splits=" + std::to_string(splits) + " "));
    // f16 rows of 36 elements start mid-chunk: word loads; rows of multiples of 8 load 16 bytes.
    const std::int64_t chunk = c.dtype == DType::f32 ? 4 : 8;
    const bool aligned = shape.dk % chunk == 0 && shape.dv % chunk == 0;
    CHECK_THAT(r.variant, Catch::Contains(aligned ? " loads=16B" : " loads=words"));
}

TEST_CASE("decode kernel: every mask and feature", "[gpu][decode][features]") {
    const int features = GENERATE(0, 1, 2, 3, 4);
    const DType kv = GENERATE(DType::f16, DType::q8_0);
    Case c = decode_case(8, 2, 200, 64, DType::f32);
    c.k_dtype = c.v_dtype = kv;
    INFO("features " << features << ", " << to_string(kv));
    c.Nq = 2;
    switch (features) {
    case 0:
        c.kv_lengths = true;
        c.window = {50, 0};
        c.sinks = true;
        break;
    case 1:
        c.bool_mask_shape = std::vector<std::int64_t>{2, 8, 2, 200};
        c.float_mask_shape = std::vector<std::int64_t>{2, 1, 1, 200};
        c.softcap = 30.0;
        break;
    case 2:
        c.causal = Causal::bottom_right;
        c.alibi_max_bias = 8.0;
        c.dropout = 0.2;
        c.dropout_seed = 11;
        break;
    case 3:  // scores in the thousands (unscaled), empty rows (lengths of 0), sinks on empty rows
        c.amplitude = 10.0f;
        c.scale = 1.0;
        c.kv_lengths = true;
        c.causal = Causal::bottom_right;
        c.sinks = true;
        break;
    case 4:
        c.causal = Causal::top_left;
        c.causal_offset = 120;
        c.alibi_slopes = true;
        break;
    }
    expect_decode(c);
}

TEST_CASE("decode kernel: a prompt of 100,000 keys", "[gpu][decode][long]") {
    Case c = decode_case(4, 1, 100000, 64, DType::f16);
    if (!device_caps().fp16_storage) c.dtype = DType::f32;
    c.B = 1;
    c.kv_lengths = true;
    expect_decode(c);
}

TEST_CASE("decode kernel: the tuning's choice", "[gpu][decode][tuning]") {
    Case c = decode_case(32, 8, 4096, 128, DType::f32);
    c.variant = {};
    const detail::FusedConfig chosen = fused_config(c);
    // GPUs choose it for a decode step; CPU devices keep flash.comp unless it is forced.
    CHECK(chosen.decode.has_value() == (device_caps().kind != vk::DeviceKind::cpu));
    c.variant.fused_kernel = FusedKernel::decode;
    const detail::FusedConfig forced = fused_config(c);
    REQUIRE(forced.decode);
    // Every subgroup holds the group's 4 rows; a key's 128 elements span 8 lanes of 16 (fewer lanes
    // where the subgroup is narrower).
    CHECK(forced.rows == 4);
    CHECK(forced.rows_per_workgroup() == 4);
    CHECK(forced.decode->lanes_per_key == std::min<std::uint32_t>(8, forced.subgroup));
    CHECK(forced.key_block() == forced.subgroups * (forced.subgroup / forced.decode->lanes_per_key) * 2);
    // Asked for flash.comp's staging, the tuning keeps flash.comp; asked for fused without splits,
    // the engine runs flash.comp, and refuses a forced decode kernel.
    c.variant = {.shared_tiles = true};
    CHECK_FALSE(fused_config(c).decode);
    Case fused = decode_case(8, 2, 100, 64, DType::f32);
    fused.impl = Impl::fused;
    fused.variant = {};
    CHECK_THAT(expect_pass(fused, Impl::fused).variant, Catch::StartsWith("fused["));
    fused.variant.fused_kernel = FusedKernel::decode;
    CHECK_THROWS_WITH(testing::run_case(gpu_context(), fused, 1), Catch::Contains("split-KV only"));
}

TEST_CASE("decode kernel: lanes per key forced, each within the subgroup", "[gpu][decode][variants]") {
    // The tuner's candidates around the heuristics' choice: the lane counts this device's subgroup
    // holds, on a head that leaves part of a chunk, a q8_0 K and f16 V, ragged lengths.
    const std::uint32_t subgroup = fused_config(decode_case(8, 2, 301, 72, DType::f32)).subgroup;
    for (const std::uint32_t lpk : {2u, 4u, 16u}) {
        if (lpk > subgroup) continue;
        Case c = decode_case(8, 2, 301, 72, DType::f32);
        c.k_dtype = DType::q8_0;
        c.Dk = 64;
        c.Dv = 72;
        c.v_dtype = device_caps().fp16_storage ? DType::f16 : DType::f32;
        c.causal = Causal::bottom_right;
        c.kv_lengths = true;
        c.variant.decode_lanes_per_key = lpk;
        INFO("lanes per key " << lpk);
        CHECK_THAT(expect_decode(c).variant, Catch::Contains(" lanes/key" + std::to_string(lpk) + " "));
    }
}

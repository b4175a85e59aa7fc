// The cooperative-matrix prefill kernel (flash_coopmat.comp, issue #33), forced on the suite's device
// so that lavapipe runs it through common/coopmat.glsl's portable implementation: shapes that are
// not multiples of 16 or of its key tiles, Dk ≠ Dv, D up to 256, GQA, column passes, every mask and
// feature on the fused and split paths, every storage type it takes (heads past 128 are refused by
// name on the matrix units, where the storage types run at D = 128). Outputs are NaN-poisoned and
// compared by run_case with the CPU reference on the operands it multiplied (rounded to f16), within
// f16's tolerance. Paged K/V, varlen and key slices run it in their own tests.
#include "support/catch.hpp"

#include <string>

#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"
#include "support/fused_features.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::test;
using testing::Case;

namespace {

Case coopmat_case(Impl impl, DType dtype) { return forced_kernel_case(FusedKernel::coopmat, impl, dtype); }

}  // namespace

// Each head shape and path is a pipeline: features share them.
TEST_CASE("coopmat kernel: head shapes and every feature, fused and split", "[gpu][coopmat][features]") {
    // One partial 16-dimension tile; 9 of Q/K with the last partial and a partial O tile; two
    // column passes (Dv 200 > 128).
    const auto [dk, dv] = GENERATE(std::pair<std::int64_t, std::int64_t>{1, 3}, std::pair{130, 66}, std::pair{72, 200});
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    Case c = coopmat_case(impl, dtype);
    if (dtype == DType::f16 && !device_caps().fp16_storage) c.dtype = DType::f32;
    if (dk > 128 || dv > 128) {  // refused on the matrix units
        Case wide = c;
        wide.Dk = dk;
        wide.Dv = dv;
        if (!wide_heads_run_here([&] { testing::run_case(gpu_context(), wide, fresh_seed()); })) return;
    }
    expect_every_feature(c, dk, dv, 128);
}

TEST_CASE("coopmat kernel: every K/V storage type it takes, D = 256 (128 on the matrix units)", "[gpu][coopmat][storage_types]") {
    const DType kv = GENERATE(DType::q8_0, DType::q4_1, DType::q5_0, DType::iq4_nl, DType::fp8_e4m3, DType::fp8_e5m2);
    Case c = coopmat_case(Impl::fused, DType::f32);
    c.Dk = c.Dv = device_caps().matrix_units ? 128 : 256;  // the widest heads each takes
    c.Nq = 21;
    c.k_dtype = c.v_dtype = kv;
    c.kv_scales = is_fp8(kv);
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;
    INFO(to_string(kv));
    expect_coopmat(c);
}

TEST_CASE("coopmat kernel: long sequences, MQA, GQA, scores in the thousands and empty rows", "[gpu][coopmat]") {
    Case c = coopmat_case(Impl::fused, DType::f32);
    c.Hq = 8;
    c.Hkv = 1;
    c.Nq = 100;
    c.Nkv = 1001;  // many key tiles: O is rescaled as the rows' maxima move
    c.Dk = c.Dv = 64;
    c.causal = Causal::top_left;
    expect_coopmat(c);
    c.Hq = 6;
    c.Hkv = 2;
    c.Nq = 33;
    c.Nkv = 47;
    c.amplitude = 10.0f;
    c.scale = 1.0;
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;  // some batches see no key: empty rows
    expect_coopmat(c);
}

TEST_CASE("coopmat kernel: its layout, and what it refuses by name", "[gpu][coopmat][tuning]") {
    Case c = coopmat_case(Impl::fused, DType::f32);
    c.Dk = c.Dv = 64;
    const detail::FusedConfig forced = fused_config(c);
    REQUIRE(forced.coopmat);
    CHECK(forced.key_block() == forced.coopmat->keys);
    CHECK(forced.rows_per_workgroup() == 16 * forced.subgroups);
    CHECK(forced.coopmat->shared_bytes(forced.subgroups) <= device_caps().max_shared_bytes);
    // Never chosen unforced for f32 storage (coopmat_by_default: f16 q, k and v on the units only).
    c.variant = {};
    CHECK_FALSE(fused_config(c).coopmat);
    // f16 and bf16 mixed: refused by name (one type of operands for all; test_coopmat_bf16.cpp runs bf16).
    Case mixed = coopmat_case(Impl::fused, DType::bf16);
    mixed.k_dtype = DType::f16;
    CHECK_THAT(expect_refused(mixed, "variant.fused_kernel"), Catch::Contains("f16 or bf16"));
}

TEST_CASE("coopmat kernel: forced tile shapes, fused and split", "[gpu][coopmat][variants]") {
    // Br and Bc through the tile knobs: one subgroup of 16 rows with 16-key tiles, two with 48,
    // eight with 16 (Q through K's 16-row tile in eight passes, as the catalogue's 12 and 16
    // subgroups take it), and three with 32 (passes of 32 rows and 16).
    const auto [rows, keys] = GENERATE(std::pair<std::uint32_t, std::uint32_t>{16, 16}, std::pair{32u, 48u}, std::pair{128u, 16u},
                                       std::pair{48u, 32u});
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    for (int features = 0; features < kFusedFeatureSets; ++features) {
        Case c = coopmat_case(impl, DType::f32);
        c.variant.tile_rows = rows;
        c.variant.tile_keys = keys;
        apply_fused_features(c, features);
        INFO(rows << "x" << keys << ", features " << features);
        const AttentionReport r = expect_coopmat(c);
        CHECK_THAT(r.variant, Catch::Contains(" rows" + std::to_string(rows) + " keys" + std::to_string(keys) + " "));
    }
    // The catalogue's shapes, as the tuner forces them: 128 to 256 rows (8 to 16 subgroups) where
    // the device's shared memory takes their tiles (the units' f16 operands do at this D;
    // lavapipe's 4-byte ones in 32 KiB do not), else refused by name.
    for (const char* name : {"coopmat-32x64", "coopmat-64x32", "coopmat-128x32", "coopmat-192x16", "coopmat-192x16-kv-apart",
                             "coopmat-192x32", "coopmat-256x16", "coopmat-256x16-kv-apart"}) {
        const VariantOverrides& shape = find_kernel_variant(name)->overrides;
        Case c = coopmat_case(impl, DType::f32);
        c.variant = shape;
        apply_fused_features(c, kFusedFeatureSets - 1);
        INFO(name);
        const auto d_tiles = static_cast<std::uint32_t>((c.Dk + 15) / 16);  // Dk = Dv: no narrower pass
        const detail::CoopmatLayout tiles{.keys = *shape.tile_keys, .dk_tiles = d_tiles, .column_tiles = d_tiles,
                                          .units = device_caps().matrix_units, .kv_apart = shape.kv_apart.value_or(false)};
        if (tiles.shared_bytes(*shape.tile_rows / 16) > device_caps().max_shared_bytes) {
            CHECK_THAT(expect_refused(c, "variant.tile_rows"), Catch::Contains("shared memory"));
            continue;
        }
        const AttentionReport r = expect_coopmat(c);
        CHECK_THAT(r.variant, Catch::Contains(" rows" + std::to_string(*shape.tile_rows) + " keys" + std::to_string(*shape.tile_keys) + " "));
    }
    Case bad = coopmat_case(Impl::fused, DType::f32);
    bad.variant.tile_keys = 24;  // no multiple of 16
    expect_refused(bad, "variant.tile_keys");
}

TEST_CASE("coopmat kernel: the tile-ahead staging with 16-byte or 4-element loads, and chunk by chunk; O named or an array",
          "[gpu][coopmat][wide]") {
    if (!device_caps().fp16_storage) return;  // f16 storage is what it loads
    // Several key tiles, so that every tile's K comes from the loads issued during the previous
    // tile's P·V (the case the units got wrong at 7-8 d-tiles with uvec4 loads); GQA and a causal
    // diagonal on the way. D 64 and 96: ahead, whole chunks on 16 bytes; D 60: ahead through the
    // typed loaders (rows of 120 bytes); D 92: chunk by chunk, as its 12 tiles through the typed
    // loaders (CoopmatLayout::ahead_with); D 112 and 128: 7 and 8 d-tiles, chunk by chunk
    // (CoopmatLayout::staged_ahead). O as named accumulators up to D 112, an array at D 128
    // (CoopmatLayout::named_by_default).
    const std::int64_t d = GENERATE(60, 64, 92, 96, 112, 128);
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    const Case c = several_key_tiles_case(impl, d);
    INFO("D " << d);
    const AttentionReport r = expect_coopmat(c);
    const detail::FusedConfig config = fused_config(c);
    REQUIRE(config.coopmat);
    const bool wide = d <= 96 && d % 8 == 0, ahead = wide || d <= 64;
    CHECK(config.coopmat->ahead == ahead);
    if (ahead) CHECK_THAT(r.variant, Catch::Contains(" ahead "));
    else CHECK_THAT(r.variant, !Catch::Contains(" ahead"));
    CHECK_THAT(r.variant, Catch::Contains(wide ? " loads=16B" : " loads=words"));
    const bool named = d <= 112;
    CHECK(config.coopmat->named == named);
    if (named) CHECK_THAT(r.variant, Catch::Contains(" named "));
    else CHECK_THAT(r.variant, !Catch::Contains(" named"));
}

TEST_CASE("coopmat kernel: O forced as an array or as named accumulators", "[gpu][coopmat][wide]") {
    if (!device_caps().fp16_storage) return;  // f16 storage, as the forms were measured
    // The catalogue's two forms at D 64 (named by default) and D 128 (an array by default), over
    // several key tiles with GQA and a causal diagonal. Named at D 128 runs in the portable
    // implementation and is refused by name on the units (wrong there on NVIDIA's driver).
    const std::int64_t d = GENERATE(64, 128);
    const char* name = GENERATE("coopmat-array", "coopmat-named");
    Case c = several_key_tiles_case(Impl::fused, d);
    c.variant = find_kernel_variant(name)->overrides;
    INFO(name << ", D " << d);
    const bool named = *c.variant.named_accumulators;
    if (named && d == 128 && device_caps().matrix_units) {
        expect_refused(c, "variant.named_accumulators");
        return;
    }
    const AttentionReport r = expect_coopmat(c);
    if (named) CHECK_THAT(r.variant, Catch::Contains(" named "));
    else CHECK_THAT(r.variant, !Catch::Contains(" named"));
}

// The GPU prefill kernel (flash_tile.comp, issue #32), forced on the suite's device so that lavapipe
// runs it too: shapes that are not multiples of its row blocks, key tiles or chunks, Dk ≠ Dv, GQA,
// column passes, every mask and feature on the fused and split paths, every storage type. Outputs
// are NaN-poisoned and compared with the CPU reference by run_case. Paged K/V, varlen and key
// slices run it in their own tests.
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

Case tile_case(Impl impl, DType dtype) { return forced_kernel_case(FusedKernel::tile, impl, dtype); }
AttentionReport expect_tile(const Case& c) { return expect_kernel(c); }

}  // namespace

// Each head shape and path is a pipeline, which lavapipe compiles in seconds: features share them.
TEST_CASE("tile kernel: head shapes and every feature, fused and split", "[gpu][tile][features]") {
    // One partial Q/K chunk and V chunk; 5 Q/K chunks, the last partial; two column passes.
    const auto [dk, dv] = GENERATE(std::pair<std::int64_t, std::int64_t>{1, 3}, std::pair{130, 66}, std::pair{72, 200});
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    Case c = tile_case(impl, dtype);
    if (dtype == DType::f16 && !device_caps().fp16_storage) c.dtype = DType::f32;
    expect_every_feature(c, dk, dv, 128);
}

TEST_CASE("tile kernel: every K/V storage type", "[gpu][tile][storage_types]") {
    const DType kv = GENERATE(DType::bf16, DType::q8_0, DType::q4_1, DType::q5_0, DType::iq4_nl, DType::fp8_e4m3);
    Case c = tile_case(Impl::fused, DType::f32);
    c.Dk = c.Dv = 64;
    c.k_dtype = c.v_dtype = kv;
    c.kv_scales = is_fp8(kv);
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;
    INFO(to_string(kv));
    expect_tile(c);
}

TEST_CASE("tile kernel: long sequences, MQA, scores in the thousands and empty rows", "[gpu][tile]") {
    Case c = tile_case(Impl::fused, DType::f32);
    c.Hq = 8;
    c.Hkv = 1;
    c.Nq = 300;
    c.Nkv = 1001;
    c.Dk = c.Dv = 64;
    c.causal = Causal::top_left;
    expect_tile(c);
    c.Nq = 33;
    c.Nkv = 47;
    c.amplitude = 10.0f;
    c.scale = 1.0;
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;  // some batches see no key: empty rows
    expect_tile(c);
}

TEST_CASE("tile kernel: the tuning's choice", "[gpu][tile][tuning]") {
    Case c = tile_case(Impl::fused, DType::f32);
    c.Dk = c.Dv = 64;
    c.variant = {};
    // GPUs choose it for prefill; CPU devices keep flash.comp unless it is forced.
    CHECK(fused_config(c).tile.has_value() == (device_caps().kind != vk::DeviceKind::cpu));
    c.variant.fused_kernel = FusedKernel::tile;
    const detail::FusedConfig forced = fused_config(c);
    REQUIRE(forced.tile);
    CHECK(forced.key_block() == forced.tile->key_groups * forced.tile->keys_per_lane);
    CHECK(forced.tile->shared_bytes(forced.subgroup, forced.subgroups) <= device_caps().max_shared_bytes);
    // Asked for flash.comp's staging, the tuning keeps flash.comp.
    c.variant = {.shared_tiles = true};
    CHECK_FALSE(fused_config(c).tile);
}

TEST_CASE("tile kernel: the catalogue's other tile shapes, fused and split, with every feature", "[gpu][tile][variants]") {
    // Each shape's rows and keys, forced as the tuner's candidates force them, over the feature sets
    // at a shape that fills none of their tiles (one pipeline per shape and path).
    const char* name = GENERATE("tile-32x64", "tile-64x32", "tile-128x32");
    const VariantOverrides& shape = find_kernel_variant(name)->overrides;
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    for (int features = 0; features < kFusedFeatureSets; ++features) {
        Case c = tile_case(impl, DType::f32);
        c.variant = shape;
        apply_fused_features(c, features);
        INFO(name << ", features " << features);
        const AttentionReport r = expect_tile(c);
        CHECK_THAT(r.variant, Catch::Contains(" rows" + std::to_string(*shape.tile_rows) + " keys" +
                                              std::to_string(*shape.tile_keys) + " "));
    }
}

TEST_CASE("tile kernel: a tile the device cannot take is refused by name where a fused kernel runs, ignored where none does",
          "[gpu][tile]") {
    Case c = tile_case(Impl::fused, DType::f32);
    c.variant.tile_rows = 3;  // no multiple of the rows a subgroup holds on any device
    try {
        testing::run_case(gpu_context(), c, fresh_seed());
        FAIL("3 rows per workgroup taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.tile_rows");
        CHECK_THAT(e.what(), Catch::Contains("query rows per workgroup"));
    }
    c.impl = Impl::unfused;  // the three-stage path never reads it
    c.weights = true;
    expect_pass(c, Impl::unfused);
}

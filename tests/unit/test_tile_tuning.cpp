// The GPU prefill kernel's tuning (attention/tile.hpp): its layout on every made-up device and head
// size, when it is chosen, its shared memory and loop budget.
#include "support/catch.hpp"

#include <bit>
#include <string>

#include "attention/tile.hpp"
#include "attention/tuning.hpp"
#include "fake_devices.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

TEST_CASE("tile tuning: GPUs choose the tile kernel for prefill, CPU devices only when forced", "[unit][tuning][tile]") {
    for (const vk::DeviceCaps& caps : all_devices())
        for (const std::int64_t nq : {9, 128, 4096}) {
            const Problem p = problem(1, 8, 8, nq, 4096, 128, 128, DType::f16);
            INFO(caps.name << " Nq=" << nq);
            const bool gpu = caps.kind != vk::DeviceKind::cpu;
            CHECK(fused_for(caps, p)->tile.has_value() == gpu);
            CHECK(fused_for(caps, p, {.fused_kernel = FusedKernel::tile})->tile);
            CHECK_FALSE(fused_for(caps, p, {.fused_kernel = FusedKernel::flash})->tile);
            CHECK_FALSE(fused_for(caps, p, {.shared_tiles = false})->tile);  // flash.comp's knob
        }
}

TEST_CASE("tile tuning: a layout every device runs, for every head size", "[unit][tuning][tile]") {
    const std::int64_t dims[] = {1, 8, 36, 64, 100, 128, 200, 256, 512};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const std::int64_t dk : dims)
            for (const std::int64_t dv : dims) {
                const Problem p = problem(2, 8, 2, 300, 1000, dk, dv);
                std::string why;
                const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::tile}, &why);
                INFO(caps.name << " Dk " << dk << " Dv " << dv << ": " << why);
                REQUIRE(c);
                REQUIRE(c->tile);
                const TileLayout& t = *c->tile;
                INFO(c->describe());
                CHECK(std::has_single_bit(t.key_groups));
                CHECK(t.key_groups <= c->subgroup);
                CHECK(c->subgroup % t.key_groups == 0);
                CHECK(t.rows_per_lane % 4 == 0);
                CHECK(t.keys_per_lane % 4 == 0);
                CHECK(t.columns % t.v_chunk() == 0);
                CHECK(t.columns <= 128);  // O: rows × 4 × columns / v_chunk ≤ 64 registers
                CHECK(c->column_passes * c->columns_per_pass() >= dv);
                CHECK((c->column_passes - 1) * c->columns_per_pass() < dv);
                CHECK(c->subgroups * c->subgroup <= caps.max_workgroup_invocations);
                CHECK(t.shared_bytes(c->subgroup, c->subgroups) <= caps.max_shared_bytes);
                CHECK(c->rows_per_workgroup() == t.rows(c->subgroup, c->subgroups));
                CHECK(c->key_block() == t.keys());
                CHECK_FALSE(c->texel);
            }
}

TEST_CASE("tile tuning: the H200's prefill", "[unit][tuning][tile]") {
    // 64 × 64 tiles: 4 subgroups of 4 row groups × 8 key groups, 4 rows × 8 keys per lane; 40 KiB
    // of fp32 tiles (Q and K chunks of 32 dimensions, P, a V chunk of 32 columns).
    const Problem p = problem(1, 32, 32, 4096, 4096, 128, 128, DType::f16);
    const FusedConfig c = *fused_for(nvidia_like(), p);
    REQUIRE(c.tile);
    CHECK(c.describe() == "tile[words sg32!x4 rows64 keys64 tr4 tc8 kg8 dc32 oc128]");
    CHECK(c.tile->shared_bytes(32, 4) == 41992);
}

TEST_CASE("tile tuning: the loop budget counts every tile's loops", "[unit][tuning][tile]") {
    vk::DeviceCaps budget = lavapipe_like();
    budget.max_loop_iterations = 65535;
    for (const std::int64_t d : {8, 64, 128, 512}) {
        const Problem p = problem(1, 8, 8, 256, 100000, d, d);
        const FusedConfig c = *fused_for(lavapipe_like(), p, {.fused_kernel = FusedKernel::tile});
        const std::int64_t keys = fused_keys_per_dispatch(budget, c, p);
        const std::int64_t tiles = keys / c.key_block();
        INFO("D " << d << ": " << keys << " keys");
        CHECK(keys % c.key_block() == 0);
        CHECK(tiles >= 1);
        CHECK(tiles * tile_loops_per_tile(*c.tile, c.subgroup, c.subgroups, p) <= 65535);
    }
}

TEST_CASE("tile tuning: forced tiles are honoured where the device takes them, refused by name where not",
          "[unit][tuning][tile]") {
    const Problem p = problem(1, 8, 8, 300, 1000, 128, 128, DType::f16);
    for (const vk::DeviceCaps& caps : all_devices()) {
        const std::uint32_t sg = fused_for(caps, p, {.fused_kernel = FusedKernel::tile})->subgroup;  // the subgroup it runs on
        const std::uint32_t kg = std::min<std::uint32_t>(8, sg), rows_per_subgroup = sg / kg * 4;
        for (const std::uint32_t br : {16u, 32u, 48u, 64u, 128u, 256u})
            for (const std::uint32_t bc : {16u, 32u, 64u, 128u}) {
                INFO(caps.name << " sg " << sg << " Br " << br << " Bc " << bc);
                const VariantOverrides forced{.fused_kernel = FusedKernel::tile, .tile_rows = br, .tile_keys = bc};
                const bool rows_ok = br % rows_per_subgroup == 0 && br / rows_per_subgroup * sg <= caps.max_workgroup_invocations;
                const bool keys_ok = bc == 4 * kg || bc == 8 * kg;
                // The smallest chunk of Q and K dimensions (4) with P and a V chunk: what must fit.
                const std::uint64_t least = 4ull * (4 * (br + 4) + 4 * (bc + 4) + bc * br + bc * 4 * kg) + 8;
                if (!keys_ok) {
                    CHECK_THROWS_WITH(fused_for(caps, p, forced), Catch::Contains("variant.tile_keys") || Catch::Contains("keys per tile"));
                    continue;
                }
                if (!rows_ok) {
                    CHECK_THROWS_WITH(fused_for(caps, p, forced), Catch::Contains("query rows per workgroup"));
                    continue;
                }
                if (least > caps.max_shared_bytes) {
                    CHECK_THROWS_WITH(fused_for(caps, p, forced), Catch::Contains("bytes of shared memory"));
                    continue;
                }
                const FusedConfig c = *fused_for(caps, p, forced);
                REQUIRE(c.tile);
                CHECK(c.rows_per_workgroup() == br);
                CHECK(c.key_block() == bc);
                CHECK(c.tile->shared_bytes(c.subgroup, c.subgroups) <= caps.max_shared_bytes);
                CHECK(c.subgroups * c.subgroup <= caps.max_workgroup_invocations);
            }
        // The knobs shape the tile kernel only: flash.comp ignores them.
        CHECK_FALSE(fused_for(caps, p, {.fused_kernel = FusedKernel::flash, .tile_rows = 48})->tile);
    }
}

TEST_CASE("tile tuning: the refusals name the field and the limit", "[unit][tuning][tile]") {
    const Problem p = problem(1, 8, 8, 300, 1000, 128, 128, DType::f16);
    try {
        fused_for(nvidia_like(), p, {.fused_kernel = FusedKernel::tile, .tile_rows = 40});
        FAIL("40 rows taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.tile_rows");
        CHECK_THAT(e.what(), Catch::Contains("multiple of 16 up to 512 (the device's 1024 invocations)"));
    }
    try {
        fused_for(nvidia_like(), p, {.fused_kernel = FusedKernel::tile, .tile_keys = 128});
        FAIL("128 keys taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.tile_keys");
        CHECK_THAT(e.what(), Catch::Contains("32 or 64"));
    }
    try {  // 256 rows × 64 keys: P alone is 64 KiB
        fused_for(nvidia_like(), p, {.fused_kernel = FusedKernel::tile, .tile_rows = 256, .tile_keys = 64});
        FAIL("a 256 x 64 tile taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.tile_rows");
        CHECK_THAT(e.what(), Catch::Contains("the device has 49152"));
    }
}

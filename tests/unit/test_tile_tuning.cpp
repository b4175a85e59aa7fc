// The GPU prefill kernel's tuning (attention/tile.hpp): its layout on every made-up device and head
// size, when it is chosen, its shared memory and loop budget.
#include <catch2/catch.hpp>

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
    CHECK(c.tile->shared_bytes(32, 4) == 40968);
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

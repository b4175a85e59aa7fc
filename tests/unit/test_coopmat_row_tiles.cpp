// The cooperative-matrix prefill kernel with two 16-row tiles per subgroup (CoopmatLayout::row_tiles,
// VariantOverrides::row_tiles; the catalogue's coopmat-rt2) and with Q read from shared memory
// (q_in_shared; coopmat-qshared): its layout on every made-up device and head size or a refusal by
// name, its shared memory on the units, and what it refuses.
#include "support/catch.hpp"

#include <string>

#include "attention/coopmat_tile.hpp"
#include "attention/tuning.hpp"
#include "fake_devices.hpp"
#include "support/coopmat_layouts.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

namespace {
const VariantOverrides kRowTiles{.fused_kernel = FusedKernel::coopmat, .row_tiles = 2};
}

TEST_CASE("coopmat tuning, two row tiles: a layout every device runs, or a refusal naming row_tiles", "[unit][tuning][coopmat]") {
    const std::int64_t dims[] = {1, 8, 36, 64, 100, 128, 200, 256};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const bool units : {false, true})
            for (const std::int64_t dk : dims)
                for (const std::int64_t dv : dims) {
                    vk::DeviceCaps device = caps;
                    device.matrix_units = units && caps.kind != vk::DeviceKind::cpu;
                    const Problem p = problem(2, 8, 2, 300, 1000, dk, dv, device.matrix_units ? DType::f16 : DType::f32);
                    INFO(caps.name << " units " << device.matrix_units << " Dk " << dk << " Dv " << dv);
                    if (!test::coopmat_fits(dk, device.matrix_units, device.max_shared_bytes, 2)) {
                        try {
                            (void)fused_for(device, p, kRowTiles);
                            FAIL("tiles past shared memory taken");
                        } catch (const InvalidArgument& e) {
                            CHECK(e.argument() == "variant.row_tiles");
                            CHECK_THAT(e.what(), Catch::Contains("shared memory"));
                        }
                        continue;
                    }
                    // (The matrix units take heads past 128 here too: Q is read from its own tile.)
                    const auto c = fused_for(device, p, kRowTiles);
                    REQUIRE(c);
                    REQUIRE(c->coopmat);
                    const CoopmatLayout& t = *c->coopmat;
                    INFO(c->describe());
                    CHECK(t.row_tiles == 2);
                    CHECK(t.column_tiles * t.row_tiles <= 8);  // O's accumulators, all named
                    CHECK(t.named);
                    CHECK(c->rows_per_workgroup() == 32 * c->subgroups);
                    CHECK(c->subgroups <= 2);
                    CHECK(c->column_passes * c->columns_per_pass() >= dv);
                    CHECK((c->column_passes - 1) * c->columns_per_pass() < dv);
                    CHECK(t.shared_bytes(c->subgroups) <= device.max_shared_bytes);
                    CHECK_THAT(c->describe(), Catch::Contains(" rt2 qshared named"));
                    // Lavapipe's loop budget counts each row tile's products.
                    CoopmatLayout one = t;
                    one.row_tiles = 1;
                    CHECK(coopmat_loops_per_tile(t, c->subgroup, c->subgroups, p) > coopmat_loops_per_tile(one, c->subgroup, c->subgroups, p));
                }
}

TEST_CASE("coopmat tuning, two row tiles: on the matrix units, 64 rows with Q's tile in 48 KiB", "[unit][tuning][coopmat]") {
    vk::DeviceCaps caps = nvidia_like();
    caps.matrix_units = true;
    Problem p = problem(1, 8, 8, 4096, 4096, 64, 64, DType::f16);
    p.k_dtype = p.v_dtype = DType::f16;
    // D 64: 2 subgroups of 32 rows and 64-key tiles. K/V 64 × 72, Q 64 × 72 (f16), S 64 × 68 (fp32),
    // P 64 × 72 (f16), the key range and V's placeholder: 45,080 bytes.
    const auto c = fused_for(caps, p, kRowTiles);
    REQUIRE(c);
    REQUIRE(c->coopmat);
    CHECK(c->subgroups == 2);
    CHECK(c->rows_per_workgroup() == 64);
    CHECK(c->coopmat->keys == 64);
    CHECK(c->coopmat->column_tiles == 4);
    CHECK(c->column_passes == 1);
    CHECK(c->coopmat->shared_bytes(c->subgroups) == 45080);
    CHECK_THAT(c->describe(), Catch::Contains(" rt2 qshared named ahead units"));
    // D 128: 64 keys would need 61,464 bytes, so 32 (40,472); O's 8 column tiles in two passes of 4.
    p.Dk = p.Dv = 128;
    const auto wide = fused_for(caps, p, kRowTiles);
    REQUIRE(wide);
    CHECK(wide->rows_per_workgroup() == 64);
    CHECK(wide->coopmat->keys == 32);
    CHECK(wide->coopmat->shared_bytes(wide->subgroups) == 40472);
    CHECK(wide->coopmat->column_tiles == 4);
    CHECK(wide->column_passes == 2);
    CHECK(wide->coopmat->named);  // Q is not held: the rule for one row tile does not apply
    CHECK_FALSE(wide->coopmat->ahead);
    // O's array, forced, runs too.
    VariantOverrides array = kRowTiles;
    array.named_accumulators = false;
    CHECK_FALSE(fused_for(caps, p, array)->coopmat->named);
    // Unforced, and forced with one row tile: one.
    p.Dk = p.Dv = 64;
    caps.maximal_reconvergence = true;
    const auto chosen = fused_for(caps, p, {});
    REQUIRE(chosen->coopmat);
    CHECK(chosen->coopmat->row_tiles == 1);
    CHECK_THAT(chosen->describe(), !Catch::Contains(" rt"));
    CHECK(fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat, .row_tiles = 1})->coopmat->row_tiles == 1);
    CHECK_FALSE(chosen->coopmat->q_in_shared);
}

TEST_CASE("coopmat tuning, Q from shared memory with one row tile: D 128 on 32-key tiles, O named", "[unit][tuning][coopmat]") {
    vk::DeviceCaps caps = nvidia_like();
    caps.matrix_units = true;
    const Problem p = problem(1, 8, 8, 4096, 4096, 128, 128, DType::f16);
    // Q's 64 × 136 tile beside K/V's: 64 keys would need 61,464 bytes, so 32 (40,472; session 26's
    // qshared probe). O named: Q is not held (named_by_default), where held at D 128 it is an array.
    const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat, .q_in_shared = true});
    REQUIRE(c);
    CHECK(c->coopmat->q_in_shared);
    CHECK(c->coopmat->row_tiles == 1);
    CHECK(c->rows_per_workgroup() == 64);
    CHECK(c->coopmat->keys == 32);
    CHECK(c->coopmat->shared_bytes(c->subgroups) == 40472);
    CHECK(c->coopmat->named);
    CHECK(c->column_passes == 1);
    CHECK_THAT(c->describe(), Catch::Contains(" qshared named units") && !Catch::Contains(" rt"));
    CHECK_FALSE(fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat})->coopmat->named);
    const KernelVariant* qshared = find_kernel_variant("coopmat-qshared");
    REQUIRE(qshared);
    CHECK(qshared->overrides.q_in_shared == true);
    CHECK_FALSE(qshared->overrides.row_tiles);
}

TEST_CASE("coopmat tuning, two row tiles: what it refuses, by name and limit", "[unit][tuning][coopmat]") {
    const vk::DeviceCaps caps = nvidia_like();
    const Problem p = problem(1, 8, 8, 128, 128, 64, 64);
    auto refused = [&](const VariantOverrides& o) { return fused_refusal(caps, p, o); };
    for (const std::uint32_t n : {0u, 3u, 4u})
        CHECK_THAT(refused({.fused_kernel = FusedKernel::coopmat, .row_tiles = n}),
                   Catch::StartsWith("variant.row_tiles") && Catch::Contains("1 or 2"));
    CHECK_THAT(refused({.fused_kernel = FusedKernel::coopmat, .row_tiles = 2, .q_in_shared = false}),
               Catch::StartsWith("variant.q_in_shared") && Catch::Contains("two row tiles"));
    CHECK_THAT(refused({.fused_kernel = FusedKernel::coopmat, .tile_rows = 48, .row_tiles = 2}),
               Catch::StartsWith("variant.tile_rows") && Catch::Contains("multiple of 32"));
    CHECK(refused({.fused_kernel = FusedKernel::coopmat, .tile_rows = 32, .tile_keys = 32, .row_tiles = 2}) == "taken");
    // The catalogue's variant is these overrides.
    const KernelVariant* rt2 = find_kernel_variant("coopmat-rt2");
    REQUIRE(rt2);
    CHECK(rt2->impl == Impl::fused);
    CHECK(rt2->overrides.row_tiles == 2u);
    CHECK(rt2->overrides.fused_kernel == FusedKernel::coopmat);
    CHECK(rounds_operands(rt2->overrides));
}

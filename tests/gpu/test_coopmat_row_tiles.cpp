// flash_coopmat.comp with two 16-row tiles per subgroup (VariantOverrides::row_tiles = 2, the
// catalogue's coopmat-rt2; issue #33): each K and V operand feeds two products, Q is read from a
// tile of its own, O's accumulators are [column tile][row tile] and heads past 64 columns take column
// passes; and with one row tile reading Q so (VariantOverrides::q_in_shared, coopmat-qshared).
// Forced on the suite's device, so lavapipe runs them portably (with 8-lane subgroups a lane
// holds four softmax rows at two row tiles): shapes that are not multiples of its tiles, every mask
// and feature, fused and split, GQA over several key tiles, and what it refuses by name. The tiles it
// takes are the device's (CoopmatLayout::shared_bytes against its shared memory), not assumed.
#include "support/catch.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include "support/coopmat_layouts.hpp"
#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"
#include "support/fused_features.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::test;
using testing::Case;

namespace {

Case row_tiles_case(Impl impl, DType dtype) {
    Case c = forced_kernel_case(FusedKernel::coopmat, impl, dtype);
    c.variant.row_tiles = 2;
    return c;
}

// The layout the case gets, checked for what two row tiles promise.
detail::CoopmatLayout expect_two_row_tiles(const Case& c) {
    const detail::FusedConfig config = fused_config(c);
    REQUIRE(config.coopmat);
    const detail::CoopmatLayout& t = *config.coopmat;
    CHECK(t.row_tiles == 2);
    CHECK(config.rows_per_workgroup() == 32 * config.subgroups);
    CHECK(t.column_tiles * t.row_tiles <= 8);  // O's accumulators, named
    CHECK(t.named);
    CHECK(t.shared_bytes(config.subgroups) <= device_caps().max_shared_bytes);
    return t;
}

AttentionReport expect_row_tiles(const Case& c) {
    expect_two_row_tiles(c);
    const AttentionReport r = expect_coopmat(c);
    CHECK_THAT(r.variant, Catch::Contains(" rt2 qshared named "));
    return r;
}

}  // namespace

TEST_CASE("coopmat kernel, two row tiles: head shapes and every feature, fused and split", "[gpu][coopmat][row_tiles]") {
    // A partial 16-dimension tile; Dk ≠ Dv with two column passes of 64 (Dv 100). (D 128 runs over
    // several key tiles below: each head shape is a pipeline, which lavapipe compiles for half a
    // minute.)
    const auto [dk, dv, impl] = GENERATE(std::tuple<std::int64_t, std::int64_t, Impl>{1, 3, Impl::fused},
                                         std::tuple<std::int64_t, std::int64_t, Impl>{1, 3, Impl::split},
                                         std::tuple<std::int64_t, std::int64_t, Impl>{72, 100, Impl::fused});
    const DType dtype = device_caps().fp16_storage ? DType::f16 : DType::f32;
    Case c = row_tiles_case(impl, dtype);
    for (int features = 0; features < kFusedFeatureSets; ++features) {
        c.Dk = dk;
        c.Dv = dv;
        Case f = c;
        apply_fused_features(f, features);
        INFO("Dk " << dk << " Dv " << dv << ", features " << features);
        const AttentionReport r = expect_row_tiles(f);
        if (dv > 64) CHECK_THAT(r.variant, Catch::Contains(" passes="));
    }
}

TEST_CASE("coopmat kernel, two row tiles: several key tiles, GQA, MQA, empty rows", "[gpu][coopmat][row_tiles]") {
    if (!device_caps().fp16_storage) return;  // f16 storage, as the units run it
    // 70 queries over 333 keys (O rescaled as the maxima move, both row tiles' factors), GQA 4/2 and
    // a causal diagonal through both row tiles of a subgroup: D 64 with 16-byte loads staged ahead,
    // fused and split; D 128's 8 d-tiles read from Q's tile, its 8 columns in two passes, chunk by
    // chunk.
    const auto [d, impl] = GENERATE(std::pair<std::int64_t, Impl>{64, Impl::fused}, std::pair{64, Impl::split},
                                    std::pair{128, Impl::fused});
    Case c = several_key_tiles_case(impl, d, row_tiles_case(impl, DType::f16).variant);
    INFO("D " << d);
    const AttentionReport r = expect_row_tiles(c);
    if (d == 64) CHECK_THAT(r.variant, Catch::Contains(" ahead "));
    else CHECK_THAT(r.variant, Catch::Contains(" passes=2"));
    // MQA, scores in the thousands, batches that see no key.
    c.Hq = 6;
    c.Hkv = 1;
    c.Nq = 33;
    c.Nkv = 47;
    c.amplitude = 10.0f;
    c.scale = 1.0;
    c.kv_lengths = true;
    expect_row_tiles(c);
}

TEST_CASE("coopmat kernel, two row tiles: the catalogue's variant, its tiles and what it refuses by name",
          "[gpu][coopmat][row_tiles][tuning]") {
    const VariantOverrides& rt2 = find_kernel_variant("coopmat-rt2")->overrides;
    CHECK(rt2.row_tiles == 2u);
    CHECK(rt2.fused_kernel == FusedKernel::coopmat);
    Case c = forced_kernel_case(FusedKernel::coopmat, Impl::fused, DType::f32);
    c.variant = rt2;
    c.Dk = c.Dv = 64;
    const detail::CoopmatLayout t = expect_two_row_tiles(c);
    // The widest tiles that fit: 2 subgroups (64 rows) and 64 keys where shared memory allows
    // (the units' f16 operands at D 64 need 45,080 bytes), fewer keys, then fewer subgroups.
    const std::uint32_t subgroups = fused_config(c).subgroups;
    if (t.keys == 64) CHECK(subgroups == std::min<std::uint32_t>(2, device_caps().max_workgroup_invocations / fused_config(c).subgroup));
    detail::CoopmatLayout wider = t;
    if (t.keys < 64) {
        wider.keys *= 2;
        CHECK(wider.shared_bytes(subgroups) > device_caps().max_shared_bytes);
    }
    expect_row_tiles(c);
    // One row tile stays the default.
    c.variant.row_tiles.reset();
    CHECK(fused_config(c).coopmat->row_tiles == 1);
    // 3 row tiles: refused by name.
    c.variant.row_tiles = 3;
    CHECK_THAT(expect_refused(c, "variant.row_tiles"), Catch::Contains("1 or 2"));
    // Rows per workgroup a multiple of a subgroup's 32.
    c.variant.row_tiles = 2;
    c.variant.tile_rows = 48;
    CHECK_THAT(expect_refused(c, "variant.tile_rows"), Catch::Contains("multiple of 32"));
    // D 256: Q's own tile of 32 rows at least, where the device's shared memory cannot take it
    // (lavapipe's 32 KiB with 4-byte operands), refused by name; elsewhere it runs (the matrix
    // units take heads past 128 where Q is read from its own tile, as two row tiles read it).
    c.variant.tile_rows.reset();
    c.Dk = c.Dv = 256;
    if (!coopmat_fits(256, device_caps().matrix_units, device_caps().max_shared_bytes, 2))
        CHECK_THAT(expect_refused(c, "variant.row_tiles"), Catch::Contains("shared memory"));
    else
        expect_row_tiles(c);
}

TEST_CASE("coopmat kernel, Q from shared memory with one row tile: head shapes, features, several key tiles",
          "[gpu][coopmat][row_tiles]") {
    const VariantOverrides& qshared = find_kernel_variant("coopmat-qshared")->overrides;
    CHECK(qshared.q_in_shared == true);
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    const DType dtype = device_caps().fp16_storage ? DType::f16 : DType::f32;
    // Every feature set at a partial last d-tile with Dk ≠ Dv (fused); then D 64 (fused) and 128
    // (fused and split; O named there, where held Q and named O computed wrong on NVIDIA's driver)
    // over 333 keys, GQA, causal; D 192 (fused and split; two column passes), which the matrix units
    // take only with Q so (refuse_wide_heads_on_units). Each is a pipeline, which lavapipe compiles
    // for 10-30 s: so few.
    for (int features = 0; features < kFusedFeatureSets && impl == Impl::fused; ++features) {
        Case c = forced_kernel_case(FusedKernel::coopmat, impl, dtype);
        c.variant = qshared;
        c.Dk = 40;
        c.Dv = 24;
        apply_fused_features(c, features);
        INFO("features " << features);
        const AttentionReport r = expect_coopmat(c);
        CHECK_THAT(r.variant, Catch::Contains(" qshared named ") && !Catch::Contains(" rt2"));
    }
    for (const std::int64_t d : {64, 128, 192}) {
        if (d == 64 && impl == Impl::split) continue;  // a pipeline that adds nothing (lavapipe's compile time)
        Case c = several_key_tiles_case(impl, d, qshared);
        c.dtype = dtype;
        INFO("D " << d);
        const detail::FusedConfig config = fused_config(c);
        REQUIRE(config.coopmat);
        CHECK(config.coopmat->q_in_shared);
        CHECK(config.coopmat->named);
        CHECK(config.coopmat->row_tiles == 1);
        CHECK(config.coopmat->shared_bytes(config.subgroups) <= device_caps().max_shared_bytes);
        const AttentionReport r = expect_coopmat(c);
        CHECK_THAT(r.variant, Catch::Contains(" qshared named "));
        if (d == 192) CHECK_THAT(r.variant, Catch::Contains("passes=2"));
    }
    // Two row tiles with Q held: refused by name.
    Case held = row_tiles_case(Impl::fused, DType::f32);
    held.variant.q_in_shared = false;
    expect_refused(held, "variant.q_in_shared");
}

// The cooperative-matrix prefill kernel's wide workgroups (the catalogue's coopmat-192x16,
// coopmat-192x16-kv-apart, coopmat-192x32, coopmat-256x16 and coopmat-256x16-kv-apart: 12 and 16 subgroups, whose
// invocations bound a compiler's registers per invocation): their layouts and shared memory on the
// units, with a held Q passing through K's tile Bc rows at a time, and the refusals by name.
#include "support/catch.hpp"

#include <cstdint>
#include <string>

#include "attention/coopmat_tile.hpp"
#include "attention/tuning.hpp"
#include "fake_devices.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

namespace {

vk::DeviceCaps units() {
    vk::DeviceCaps caps = nvidia_like();
    caps.matrix_units = true;
    return caps;
}

Problem f16_problem(std::int64_t d) {
    Problem p = problem(1, 32, 32, 4096, 4096, d, d, DType::f16);
    p.k_dtype = p.v_dtype = DType::f16;
    return p;
}

}  // namespace

TEST_CASE("coopmat tuning, wide workgroups: 12 and 16 subgroups on the units, K's tile as many rows as keys",
          "[unit][tuning][coopmat]") {
    struct Expected {
        const char* name;
        std::int64_t d;
        std::uint32_t rows, keys, subgroups, shared;
    };
    // K's tile [Bc][D + 8] f16, S [Br][Bc + 4] fp32 and P [Br][Bc + 8] f16, Q's and V's 16-byte
    // placeholders (V's own [Bc][D + 8] with K and V apart), the key range's 8 bytes.
    const Expected expected[] = {
        {"coopmat-192x16", 64, 192, 16, 12, 26920},  {"coopmat-192x16", 128, 192, 16, 12, 28968},
        {"coopmat-192x16-kv-apart", 128, 192, 16, 12, 33304},
        {"coopmat-192x32", 64, 192, 32, 12, 47656},  {"coopmat-256x16", 64, 256, 16, 16, 35112},
        {"coopmat-256x16", 128, 256, 16, 16, 37160}, {"coopmat-256x16-kv-apart", 128, 256, 16, 16, 41496},
        // 8 subgroups at D 128: K's tile no longer holds Q's 128 rows (47,144 bytes at D 64 before).
        {"coopmat-128x32", 128, 128, 32, 8, 37416},
    };
    for (const Expected& e : expected) {
        INFO(e.name << " at D " << e.d);
        const KernelVariant* v = find_kernel_variant(e.name);
        REQUIRE(v);
        const auto c = fused_for(units(), f16_problem(e.d), v->overrides);
        REQUIRE(c);
        REQUIRE(c->coopmat);
        CHECK(c->rows_per_workgroup() == e.rows);
        CHECK(c->subgroups == e.subgroups);
        CHECK(c->subgroups * c->subgroup <= units().max_workgroup_invocations);
        CHECK(c->coopmat->keys == e.keys);
        CHECK(c->coopmat->shared_bytes(c->subgroups) == e.shared);
        CHECK(c->coopmat->kv_apart == v->overrides.kv_apart.value_or(false));
        // Whole d-tiles in one pass: O's 8 accumulators at D 128.
        CHECK(c->column_passes == 1);
    }
    // 192 rows of 32 keys need 51,752 bytes at D 128: refused by the knob forced, with the limit.
    CHECK_THAT(fused_refusal(units(), f16_problem(128), find_kernel_variant("coopmat-192x32")->overrides),
               Catch::StartsWith("variant.tile_rows") && Catch::Contains("51752") && Catch::Contains("49152"));
    // A device of 256 invocations takes 8 subgroups of 32 lanes: 256 rows refused, naming the most.
    vk::DeviceCaps small = units();
    small.max_workgroup_invocations = 256;
    CHECK_THAT(fused_refusal(small, f16_problem(64), find_kernel_variant("coopmat-256x16")->overrides),
               Catch::StartsWith("variant.tile_rows") && Catch::Contains("up to 128"));
    // Never unforced: the heuristics keep 4 subgroups.
    vk::DeviceCaps chosen = units();
    chosen.maximal_reconvergence = true;
    const auto unforced = fused_for(chosen, f16_problem(64));
    REQUIRE(unforced);
    REQUIRE(unforced->coopmat);
    CHECK(unforced->subgroups == 4);
}

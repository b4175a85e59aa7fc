// The cooperative-matrix prefill kernel with K and V in shared tiles of their own
// (CoopmatLayout::kv_apart, VariantOverrides::kv_apart; the catalogue's coopmat-kv-apart and
// coopmat-rt2-kv-apart): its layout on every made-up device and head size or a refusal by name, and
// its shared memory on the units.
#include "support/catch.hpp"

#include <string>
#include <vector>

#include "attention/coopmat_tile.hpp"
#include "attention/tuning.hpp"
#include "fake_devices.hpp"
#include "support/coopmat_layouts.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

TEST_CASE("coopmat tuning, K and V apart: a layout every device runs, or a refusal naming kv_apart", "[unit][tuning][coopmat]") {
    const std::int64_t dims[] = {1, 8, 36, 64, 100, 128, 200, 256};
    std::vector<vk::DeviceCaps> devices = all_devices();
    devices.push_back(nvidia_like(16384));  // 16 KiB: D 256's smallest tiles (21,288 bytes) do not fit
    int refusals = 0;
    for (const vk::DeviceCaps& caps : devices)
        for (const std::int64_t dk : dims)
            for (const std::int64_t dv : dims) {
                const Problem p = problem(2, 8, 2, 300, 1000, dk, dv);
                INFO(caps.name << " Dk " << dk << " Dv " << dv);
                try {
                    const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat, .kv_apart = true});
                    REQUIRE(c);
                    REQUIRE(c->coopmat);
                    INFO(c->describe());
                    CHECK(c->coopmat->kv_apart);
                    CHECK(c->coopmat->shared_bytes(c->subgroups) <= caps.max_shared_bytes);
                    CHECK_THAT(c->describe(), Catch::Contains(" kv-apart"));
                    CHECK(c->column_passes * c->columns_per_pass() >= dv);
                } catch (const InvalidArgument& e) {
                    ++refusals;
                    // Only where even one subgroup's 16-key tiles do not fit.
                    CHECK(e.argument() == "variant.kv_apart");
                    CHECK_THAT(e.what(), Catch::Contains("shared memory"));
                    CHECK_FALSE(test::coopmat_fits(dk, caps.matrix_units, caps.max_shared_bytes, 1, true));
                }
            }
    CHECK(refusals > 0);
}

TEST_CASE("coopmat tuning, K and V apart: on the matrix units", "[unit][tuning][coopmat]") {
    vk::DeviceCaps caps = nvidia_like();
    caps.matrix_units = true;
    Problem p = problem(1, 8, 8, 4096, 4096, 64, 64, DType::f16);
    p.k_dtype = p.v_dtype = DType::f16;
    const VariantOverrides apart{.fused_kernel = FusedKernel::coopmat, .kv_apart = true};
    // D 64: 64 × 64 tiles. K 64 × 72 (Q's rows at the start), V 64 × 72, S and P as with K and V
    // taking turns, Q's placeholder: 45,080 bytes; both tiles staged ahead.
    const auto c = fused_for(caps, p, apart);
    REQUIRE(c);
    CHECK(c->rows_per_workgroup() == 64);
    CHECK(c->coopmat->keys == 64);
    CHECK(c->coopmat->shared_bytes(c->subgroups) == 45080);
    CHECK(c->coopmat->ahead);
    CHECK_THAT(c->describe(), Catch::Contains(" kv-apart named ahead units"));
    // With two row tiles Q's own tile joins them: 64 keys would need 54,280 bytes, so 32 (32,776).
    VariantOverrides both = apart;
    both.row_tiles = 2;
    const auto rt2 = fused_for(caps, p, both);
    REQUIRE(rt2);
    CHECK(rt2->rows_per_workgroup() == 64);
    CHECK(rt2->coopmat->keys == 32);
    CHECK(rt2->coopmat->shared_bytes(rt2->subgroups) == 32776);
    CHECK_THAT(rt2->describe(), Catch::Contains(" rt2 qshared kv-apart named"));
    // D 128: 32-key tiles (31,768 bytes: K's tile 32 rows, Q passing through it in two), chunk by chunk.
    p.Dk = p.Dv = 128;
    const auto wide = fused_for(caps, p, apart);
    REQUIRE(wide);
    CHECK(wide->coopmat->keys == 32);
    CHECK(wide->coopmat->shared_bytes(wide->subgroups) == 31768);
    CHECK_FALSE(wide->coopmat->ahead);
    // Never unforced; the catalogue's variants are these overrides.
    caps.maximal_reconvergence = true;
    CHECK_FALSE(fused_for(caps, p, {})->coopmat->kv_apart);
    for (const char* name : {"coopmat-kv-apart", "coopmat-rt2-kv-apart"}) {
        const KernelVariant* v = find_kernel_variant(name);
        REQUIRE(v);
        CHECK(v->overrides.kv_apart == true);
        CHECK(v->overrides.fused_kernel == FusedKernel::coopmat);
    }
    CHECK(find_kernel_variant("coopmat-rt2-kv-apart")->overrides.row_tiles == 2u);
}

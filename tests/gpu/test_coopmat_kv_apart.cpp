// flash_coopmat.comp with K and V in shared tiles of their own (VariantOverrides::kv_apart; the
// catalogue's coopmat-kv-apart and, with two row tiles per subgroup, coopmat-rt2-kv-apart; issue
// #33): both staged together at a key tile's start, both a whole tile ahead in registers, 2
// workgroup barriers per key tile. Forced on the suite's device, so lavapipe runs it portably:
// every feature set, fused and split, with one row tile and two; GQA over several key tiles,
// staged ahead (D 64) and chunk by chunk (D 128); paged K/V; its tiles within the device's shared
// memory.
#include "support/catch.hpp"

#include <string>

#include "support/coopmat_layouts.hpp"
#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"
#include "support/fused_features.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::test;
using testing::Case;

namespace {

// The case with the catalogue's variant `name`, checked against the reference; the layout K and V
// apart.
AttentionReport expect_kv_apart(Case c, const char* name) {
    c.variant = find_kernel_variant(name)->overrides;
    const detail::FusedConfig config = fused_config(c);
    REQUIRE(config.coopmat);
    CHECK(config.coopmat->kv_apart);
    CHECK(config.coopmat->shared_bytes(config.subgroups) <= device_caps().max_shared_bytes);
    const AttentionReport r = expect_coopmat(c);
    CHECK_THAT(r.variant, Catch::Contains(" kv-apart "));
    return r;
}

}  // namespace

TEST_CASE("coopmat kernel, K and V apart: every feature, fused and split, one row tile and two", "[gpu][coopmat][kv_apart]") {
    const auto [name, impl] = GENERATE(std::pair<const char*, Impl>{"coopmat-kv-apart", Impl::fused},
                                       std::pair{"coopmat-kv-apart", Impl::split}, std::pair{"coopmat-rt2-kv-apart", Impl::fused});
    const DType dtype = device_caps().fp16_storage ? DType::f16 : DType::f32;
    for (int features = 0; features < kFusedFeatureSets; ++features) {
        Case c = forced_kernel_case(FusedKernel::coopmat, impl, dtype);
        c.Dk = 40;  // a partial last d-tile; V narrower than K, so their tiles differ in width
        c.Dv = 24;
        apply_fused_features(c, features);
        INFO(name << ", features " << features);
        expect_kv_apart(c, name);
    }
}

TEST_CASE("coopmat kernel, K and V apart: several key tiles, staged ahead and chunk by chunk", "[gpu][coopmat][kv_apart]") {
    if (!device_caps().fp16_storage) return;  // f16 storage, as the units run it
    // 333 keys: every tile's K and V come from the loads issued during the previous tile; GQA 4/2,
    // a causal diagonal. D 64: ahead (16-byte loads), fused and split, with one row tile and two;
    // D 128: chunk by chunk (two row tiles there: lavapipe's 32 KiB refuses them by name). Each
    // case is a pipeline, which lavapipe compiles for 10-30 s: so few.
    struct Run {
        const char* name;
        std::int64_t d;
        Impl impl;
    };
    const Run run = GENERATE(Run{"coopmat-kv-apart", 64, Impl::fused}, Run{"coopmat-kv-apart", 64, Impl::split},
                             Run{"coopmat-kv-apart", 128, Impl::fused}, Run{"coopmat-rt2-kv-apart", 64, Impl::fused},
                             Run{"coopmat-rt2-kv-apart", 128, Impl::fused});
    const char* name = run.name;
    const std::int64_t d = run.d;
    Case c = several_key_tiles_case(run.impl, run.d);
    INFO(name << ", D " << d);
    // Where even one subgroup's 16-key tiles do not fit (two row tiles at D 128 in lavapipe's 32 KiB
    // of 4-byte operands), refused by name.
    const VariantOverrides& variant = find_kernel_variant(name)->overrides;
    const std::uint32_t row_tiles = variant.row_tiles.value_or(1);
    if (!coopmat_fits(d, device_caps().matrix_units, device_caps().max_shared_bytes, row_tiles, true)) {
        c.variant = variant;
        CHECK_THAT(expect_refused(c, row_tiles > 1 ? "variant.row_tiles" : "variant.kv_apart"), Catch::Contains("shared memory"));
        return;
    }
    const AttentionReport r = expect_kv_apart(c, name);
    if (d == 64) CHECK_THAT(r.variant, Catch::Contains(" ahead "));
    else CHECK_THAT(r.variant, !Catch::Contains(" ahead"));
}

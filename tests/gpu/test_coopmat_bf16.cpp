// bf16 operands on the cooperative-matrix prefill kernel (flash_coopmat.comp built with CM_BF16,
// issue #33): bf16 storage multiplies bf16 operands, whose range is fp32's (f16's would overflow past
// ±65,504), portably here and on matrix units that take bf16 (DeviceCaps::bf16_matrix_units); on
// units that do not, it is refused by name. Every feature fused and split, the stagings (16-byte
// chunks copied as stored, the typed loaders, chunk by chunk), f32 Q with bf16 K/V, quantized K/V
// beside bf16 Q, values past f16's range; NaN-poisoned outputs against the reference on the
// bf16-rounded operands (testing/rounded_operands.hpp) within bf16's tolerance. The backward's and
// the paged cache's bf16 cases are in their own tests.
#include "support/catch.hpp"

#include <cmath>

#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"
#include "support/fused_features.hpp"

using namespace vkattn;
using namespace vkattn::test;
using testing::Case;

namespace {

Case bf16_case(Impl impl) { return forced_kernel_case(FusedKernel::coopmat, impl, DType::bf16); }

// Whether the device runs bf16 operands (the portable implementation, or units that take bf16) on
// bf16 storage (16-bit stores).
bool bf16_runs_here() { return device_caps().fp16_storage && coopmat_bf16_runs_here(); }

}  // namespace

TEST_CASE("coopmat bf16: taken where the device runs bf16 operands, refused by name where its units do not",
          "[gpu][coopmat][bf16]") {
    if (!device_caps().fp16_storage) return;  // no bf16 storage to speak of
    Case c = bf16_case(Impl::fused);
    c.Dk = c.Dv = 64;
    if (bf16_runs_here()) {
        const AttentionReport r = expect_coopmat(c);
        CHECK_THAT(r.variant, Catch::Contains(" bf16"));
        CHECK_THAT(r.variant, Catch::Contains(device_caps().matrix_units ? " units" : " portable"));
    } else {
        CHECK_THAT(expect_refused(c, "variant.fused_kernel"), Catch::Contains("bf16_matrix_units_off"));
    }
    // f16 beside bf16: one operand type for all, refused by name everywhere.
    Case mixed = c;
    mixed.dtype = DType::f16;
    mixed.v_dtype = DType::bf16;
    CHECK_THAT(expect_refused(mixed, "variant.fused_kernel"), Catch::Contains("f16 or bf16"));
}

TEST_CASE("coopmat bf16: every feature, fused and split", "[gpu][coopmat][bf16][features]") {
    if (!bf16_runs_here()) return;  // refused there (above)
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    for (int features = 0; features < kFusedFeatureSets; ++features) {
        Case c = bf16_case(impl);
        c.Dk = 72;  // a partial 16-dimension tile
        c.Dv = 40;
        apply_fused_features(c, features);
        INFO("features " << features << ", " << to_string(impl));
        expect_coopmat(c);
    }
}

TEST_CASE("coopmat bf16: the stagings, and bf16 beside f32 and quantized storage", "[gpu][coopmat][bf16][wide]") {
    if (!bf16_runs_here()) return;
    // D 64: K/V a phase ahead as 16-byte chunks of 8 bf16, copied as stored (rows on 16 bytes);
    // D 60: ahead through the typed loaders; D 112: chunk by chunk (CoopmatLayout::staged_ahead).
    for (const std::int64_t d : {64, 60, 112}) {
        Case c = several_key_tiles_case(Impl::fused, d);
        c.dtype = DType::bf16;
        INFO("D " << d);
        const AttentionReport r = expect_coopmat(c);
        CHECK_THAT(r.variant, Catch::Contains(d == 64 ? "loads=16B" : "loads=words"));
        CHECK_THAT(r.variant, Catch::Contains(d == 112 ? "ot7 named" : " ahead"));
    }
    // f32 Q (and O) with bf16 K/V, and bf16 Q with ggml's blocks and fp8: bf16 operands.
    Case f32_q = bf16_case(Impl::split);
    f32_q.dtype = DType::f32;
    f32_q.k_dtype = f32_q.v_dtype = DType::bf16;
    f32_q.causal = Causal::bottom_right;
    expect_coopmat(f32_q);
    for (const DType kv : {DType::q8_0, DType::fp8_e5m2}) {
        Case c = bf16_case(Impl::fused);
        c.Dk = c.Dv = 64;
        c.k_dtype = c.v_dtype = kv;
        c.kv_scales = is_fp8(kv);
        INFO(to_string(kv));
        expect_coopmat(c);
    }
}

TEST_CASE("coopmat bf16: values past f16's range", "[gpu][coopmat][bf16]") {
    // q and k of magnitude up to 10⁶ (f16 tops out at 65,504), the scale bringing the scores back to
    // the unit range: bf16 operands keep every value finite, and o matches the reference.
    if (!bf16_runs_here()) return;
    Case c = past_f16_range(bf16_case(Impl::fused));
    c.causal = Causal::bottom_right;
    const testing::CaseResult r = testing::run_case(gpu_context(), c, fresh_seed());
    INFO(r.message);
    CHECK(r.ok);
    CHECK(r.report.product_type == DType::bf16);
}

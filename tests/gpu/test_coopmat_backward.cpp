// The backward pass on cooperative matrices (flash_bwd_q_coopmat.comp, flash_bwd_kv_coopmat.comp;
// issue #33), forced with VariantOverrides::fused_kernel = coopmat (the forward then runs
// flash_coopmat.comp), so that lavapipe runs them through common/coopmat.glsl's portable
// implementation: every feature case the fused backward runs, shapes off every tile, GQA, f16, the
// same bits on every run, and what they refuse. Gradients are compared with the reference on the
// f16-rounded operands at f16's gradient tolerance (support/backward_case.hpp).
#include "support/catch.hpp"

#include <string>

#include "attention/coopmat_tile.hpp"
#include "support/backward_case.hpp"
#include "support/device_tuning.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::test;

namespace {

BackwardCase coopmat(BackwardCase c) {
    c.options.variant.fused_kernel = FusedKernel::coopmat;
    c.options.variant.texel_loads.reset();  // the coopmat kernels read words
    return c;
}

AttentionReport check_coopmat(const BackwardCase& c, std::uint32_t seed) {
    const AttentionReport r = check_case(c, seed);
    if (c.options.impl != Impl::unfused) {
        CHECK_THAT(r.variant, Catch::StartsWith("backward-coopmat["));
        const bool bf16 = c.dtype == DType::bf16 || c.k_dtype == DType::bf16 || c.v_dtype == DType::bf16;
        CHECK(r.product_type == (bf16 ? DType::bf16 : DType::f16));
    }
    return r;
}

}  // namespace

TEST_CASE("coopmat backward: every feature against the reference", "[gpu][backward][coopmat]") {
    std::uint32_t seed = 6000;
    for (BackwardCase c : feature_cases()) {
        c = coopmat(c);
        if (c.column_passes) {  // 128 gradient columns per pass: 160 take two (refused on the matrix units)
            c.Dk = 160;
            c.Dv = 136;
            if (!wide_heads_run_here([&] { check_case(c, seed); })) {
                ++seed;
                continue;
            }
        }
        check_coopmat(c, seed++);
    }
}

TEST_CASE("coopmat backward: shapes off every tile, GQA, f16", "[gpu][backward][coopmat]") {
    std::uint32_t seed = 6500;
    for (const std::int64_t n : {1, 17, 70})
        for (const std::int64_t d : {8, 40, 72}) {
            BackwardCase c;
            c.name = "causal bottom-right, GQA 6/2";
            c.B = 1, c.Hq = 6, c.Hkv = 2, c.Nq = n, c.Nkv = n + 5, c.Dk = d, c.Dv = d + 8;
            c.options.causal = Causal::bottom_right;
            check_coopmat(coopmat(c), seed++);
        }
    BackwardCase h;
    h.name = "f16, causal, sinks";
    h.dtype = DType::f16;
    h.options.causal = Causal::top_left;
    h.sinks = true;
    check_coopmat(coopmat(h), seed++);
}

TEST_CASE("coopmat backward: the same inputs give the same bits", "[gpu][backward][coopmat][determinism]") {
    BackwardCase c = coopmat(BackwardCase{});
    c.name = "determinism";
    c.Nq = c.Nkv = 150;
    c.options.causal = Causal::top_left;
    expect_same_bits(c, 6900);
}

TEST_CASE("coopmat backward: bf16 storage on bf16 operands; f16 and bf16 mixed refused by name; three stages unaffected by "
          "the knob", "[gpu][backward][coopmat][bf16]") {
    // bf16 storage multiplies bf16 operands (fp32's range): against the reference within bf16's
    // gradient tolerance, here and on matrix units that take bf16; refused by name on units that do
    // not (DeviceInfo::bf16_matrix_units_off).
    auto refused = [](const BackwardCase& c, std::uint32_t seed) {
        const Inputs in(c, seed);
        Gradients g = gradients_like(in, c);
        try {
            attention_backward(test::gpu_context(), in.in, in.grad_out.view(), views(g, false), c.options);
            FAIL(c.name + " taken");
            return std::string();
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "variant.fused_kernel");
            return std::string(e.what());
        }
    };
    BackwardCase c = coopmat(BackwardCase{});
    c.name = "bf16, causal, GQA 4/2, Dk 40 Dv 24";
    if (!device_caps().fp16_storage) return;  // bf16 storage takes 16-bit stores
    c.dtype = DType::bf16;
    c.Hq = 4, c.Hkv = 2, c.Nq = 37, c.Nkv = 45, c.Dk = 40, c.Dv = 24;
    c.options.causal = Causal::bottom_right;
    if (!coopmat_bf16_runs_here())
        CHECK_THAT(refused(c, 6950), Catch::Contains("bf16"));
    else
        check_coopmat(c, 6950);
    BackwardCase mixed = c;
    mixed.name = "q f16, k and v bf16";
    mixed.dtype = DType::f16;
    mixed.k_dtype = mixed.v_dtype = DType::bf16;
    CHECK_THAT(refused(mixed, 6955), Catch::Contains("f16 or bf16"));
    BackwardCase three = coopmat(BackwardCase{});
    three.name = "three stages with the knob set";
    three.options.impl = Impl::unfused;
    check_coopmat(three, 6960);
}

TEST_CASE("coopmat backward: chosen unforced for f16 where the forward's is", "[gpu][backward][coopmat]") {
    // The tuning's rule (detail::choose_backward reads the forward's, detail::coopmat_by_default):
    // f16 storage takes the cooperative-matrix kernels unforced on a GPU's matrix units with maximal
    // reconvergence; elsewhere the register kernels, on lavapipe with its units too (Mesa 26.1:
    // forced or tuned there, never chosen). Either way the gradients match the reference.
    detail::Problem f16;
    f16.dtype = f16.k_dtype = f16.v_dtype = DType::f16;
    const bool chosen = detail::coopmat_by_default(device_caps(), f16);
    BackwardCase c;
    c.name = "f16, unforced, causal, GQA 6/2";
    c.dtype = DType::f16;
    c.B = 1, c.Hq = 6, c.Hkv = 2, c.Nq = 70, c.Nkv = 75, c.Dk = c.Dv = 64;
    c.options.causal = Causal::bottom_right;
    const AttentionReport r = check_case(c, 6980);
    CHECK_THAT(r.variant, Catch::StartsWith(chosen ? "backward-coopmat[" : "backward["));
    CHECK(r.product_type == (chosen ? DType::f16 : DType::f32));
}

// The backward on workgroup-scope matrices (bwd_cm2_q.comp, bwd_cm2_kv.comp; VariantOverrides::
// workgroup_matrices beside fused_kernel = coopmat, the catalogue's backward-coopmat-wg; issue #33):
// where the suite's device offers them (DeviceInfo::workgroup_matrices), every feature case of the
// fused backward at f16 storage, shapes off the tiles with GQA, and the same bits on every run,
// against the reference: through the driver's matrices where the suite's device offers them
// (DeviceInfo::workgroup_matrices), else (lavapipe) through common/wg_matrix.glsl's portable
// implementation, which runs the same kernels' tiling, masks and gradients.
#include "support/catch.hpp"

#include <string>

#include "support/backward_case.hpp"
#include "support/device_tuning.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::test;

namespace {

BackwardCase on_workgroup_matrices(BackwardCase c) {
    c.dtype = DType::f16;
    c.k_dtype.reset();
    c.v_dtype.reset();
    c.options.variant.fused_kernel = FusedKernel::coopmat;
    c.options.variant.workgroup_matrices = true;
    c.options.variant.texel_loads.reset();
    return c;
}

// The refusal's message (a case taken fails). The host call plans the forward with the same options
// first, so where both would refuse (K's rows off 16 bytes) the forward's refusal is the one seen;
// the backward's own are unit-tested (test_coopmat_workgroup.cpp).
std::string refusal(const BackwardCase& c, std::uint32_t seed) {
    const Inputs in(c, seed);
    Gradients g = gradients_like(in, c);
    try {
        attention_backward(gpu_context(), in.in, in.grad_out.view(), views(g, false), c.options);
        FAIL(c.name + " taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.workgroup_matrices");
        return e.what();
    }
    return {};
}

}  // namespace

TEST_CASE("workgroup matrices backward: every feature against the reference", "[gpu][backward][coopmat][workgroup]") {
    if (!device_caps().fp16_storage) return;
    std::uint32_t seed = 7000;
    const std::string kind = gpu_context().device().workgroup_matrices ? " units" : " portable";
    for (BackwardCase c : feature_cases()) {
        if (c.column_passes || c.dtype != DType::f32 || c.k_dtype || c.v_dtype) continue;  // heads to 128, one type
        // Heads of a multiple of 8 (tensor loads start every row's tile on 16 bytes; 28 and 9 would be refused).
        c.Dk = (c.Dk + 7) / 8 * 8;
        c.Dv = (c.Dv + 7) / 8 * 8;
        c = on_workgroup_matrices(c);
        const AttentionReport r = check_case(c, seed++);
        if (c.options.impl != Impl::unfused) CHECK_THAT(r.variant, Catch::Contains(kind) && Catch::Contains(" workgroup"));
    }
    for (const std::int64_t n : {17, 70, 150})
        for (const std::int64_t d : {40, 64, 128}) {
            BackwardCase c;
            c.name = "causal bottom-right, GQA 6/2";
            c.B = 1, c.Hq = 6, c.Hkv = 2, c.Nq = n, c.Nkv = n + 5, c.Dk = d, c.Dv = d == 128 ? 64 : d + 8;
            c.options.causal = Causal::bottom_right;
            check_case(on_workgroup_matrices(c), seed++);
        }
    // Heads of 36: rows 72 bytes apart, which tensor loads cannot start every tile of on 16 bytes.
    BackwardCase narrow = on_workgroup_matrices(BackwardCase{});
    narrow.name = "Dk 36";
    narrow.Dk = narrow.Dv = 36;
    CHECK_THAT(refusal(narrow, seed++), Catch::Contains("16 bytes"));
}

TEST_CASE("workgroup matrices backward: bf16 storage on bf16 operands", "[gpu][backward][coopmat][workgroup][bf16]") {
    // bf16 q, k, v and dO: bf16 tensor loads and operands (bwd_cm2_*_bf16), bf16 gradients, within
    // bf16's gradient tolerance; refused by name where the driver's workgroup matrices take f16 alone.
    if (!device_caps().fp16_storage) return;  // bf16 gradients take 16-bit stores
    BackwardCase c = on_workgroup_matrices(BackwardCase{});
    c.name = "bf16, causal, GQA 4/2, Dk 40 Dv 24";
    c.dtype = DType::bf16;
    c.Hq = 4, c.Hkv = 2, c.Nq = 37, c.Nkv = 45, c.Dk = 40, c.Dv = 24;
    c.options.causal = Causal::bottom_right;
    if (!workgroup_bf16_runs_here()) {  // bf16 units without bf16 workgroup shapes: refused by this knob
        if (coopmat_bf16_runs_here()) CHECK_THAT(refusal(c, 7600), Catch::Contains("bf16"));
        return;
    }
    AttentionReport r = check_case(c, 7600);
    CHECK(r.product_type == DType::bf16);
    CHECK_THAT(r.variant, Catch::Contains(" workgroup"));
    c.name = "bf16, dropout and softcap, D 64";
    c.Dk = c.Dv = 64;
    c.options.dropout = 0.2;
    c.options.softcap = 3.0;
    r = check_case(c, 7601);
    CHECK(r.product_type == DType::bf16);
}

TEST_CASE("workgroup matrices backward: the same inputs give the same bits", "[gpu][backward][coopmat][workgroup]") {
    if (!device_caps().fp16_storage) return;
    BackwardCase c = on_workgroup_matrices(BackwardCase{});
    c.name = "determinism";
    c.Nq = c.Nkv = 150;
    c.options.causal = Causal::top_left;
    expect_same_bits(c, 7500);
}

TEST_CASE("workgroup matrices backward: keys and queries up to the loop budget, in one dispatch", "[gpu][backward][coopmat][workgroup]") {
    // Where the device ends a shader's loops past a budget (lavapipe), the planner caps the keys one
    // dQ workgroup visits and the queries one dK/dV workgroup visits by the twin's loop counts
    // (workgroup_backward_loops_per_key_tile, _per_query_tile): at the caps the gradients must still
    // be right, or the counts are short.
    if (!device_caps().fp16_storage || device_caps().max_loop_iterations == 0) return;
    BackwardCase c = on_workgroup_matrices(BackwardCase{});
    c.name = "at the loop budget";
    c.B = 1, c.Hq = c.Hkv = 1, c.Nq = c.Nkv = 64, c.Dk = c.Dv = 32;  // the limits depend on the heads and group alone
    const detail::AttentionSpec spec = dense_spec(c, c.options.variant);
    const detail::Problem p = detail::resolve(spec);
    std::string why;
    const auto config = detail::choose_backward(device_caps(), p, spec.q.strides, spec.k.strides, spec.v.strides, spec.o.strides,
                                                c.options.variant, &why);
    INFO(why);
    REQUIRE(config);
    REQUIRE(config->coopmat);
    c.Nkv = detail::backward_keys_limit(device_caps(), *config, p);
    c.Nq = detail::backward_queries_limit(device_caps(), *config, p);
    INFO(config->describe() << ": " << c.Nq << " queries, " << c.Nkv << " keys");
    REQUIRE(c.Nkv > 0);
    REQUIRE(c.Nq > 0);
    const AttentionReport r = check_case(c, 7900);
    CHECK_THAT(r.variant, Catch::Contains(" workgroup"));
    // Dropout takes the dK/dV kernel's longer branch (W, W∘dP, then dS), which the count includes.
    c.name = "at the loop budget, dropout and softcap";
    c.options.dropout = 0.2;
    c.options.softcap = 4.0;
    check_case(c, 7901);
}

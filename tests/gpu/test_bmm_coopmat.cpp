// bmm_coopmat.comp (issue #33): bmm.comp's contract on 16×16×16 cooperative matrices through
// common/coopmat.glsl, here its portable implementation (the suite's device has no matrix units, or
// no glslang that compiles them yet). Each form at sizes off its 64×64 tiles and 16-deep slices,
// GQA heads, chunks of rows, the addends, operand and output types, against a double-precision
// product of the operands rounded to f16 as the kernel rounds them.
#include "support/catch.hpp"

#include "attention/device_rules.hpp"
#include "support/bmm_product.hpp"
#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"

using namespace vkattn;
using namespace vkattn::test;

namespace {

detail::BmmConfig coopmat_config() {
    const detail::BmmConfig c = detail::choose_gemm(detail::ContextAccess::runtime(gpu_context()).device().caps(), 1, 1, 1,
                                                    {.gemm_kernel = GemmKernel::coopmat});
    REQUIRE(c.coopmat);
    return c;
}

}  // namespace

TEST_CASE("bmm coopmat: every form at sizes off the tiles and slices", "[gpu][bmm][coopmat]") {
    const detail::BmmConfig config = coopmat_config();
    const detail::BmmForm form = GENERATE(detail::BmmForm::a_bt, detail::BmmForm::a_b, detail::BmmForm::at_b);
    check_product(config, {.form = form, .B = 1, .H = 2, .M = 70, .N = 81, .K = 37});
    check_product(config, {.form = form, .M = 1, .N = 1, .K = 1});
}

TEST_CASE("bmm coopmat: GQA heads, a chunk of rows, alpha, the addends and the types", "[gpu][bmm][coopmat]") {
    const detail::BmmConfig config = coopmat_config();
    check_product(config, {.form = detail::BmmForm::a_bt, .B = 2, .H = 4, .group = 2, .M = 37, .N = 70, .K = 40,
                           .first_row = 5, .rows = 20, .alpha = 0.125f});
    check_product(config, {.form = detail::BmmForm::a_bt, .M = 70, .N = 33, .K = 9, .add = detail::BmmAdd::bias});
    check_product(config, {.form = detail::BmmForm::a_b, .H = 2, .M = 45, .N = 12, .K = 130, .add = detail::BmmAdd::residual});
    check_product(config, {.form = detail::BmmForm::at_b, .H = 2, .M = 131, .N = 20, .K = 17, .first_row = 64, .rows = 67});
    for (const DType k : {DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::fp8_e4m3}) {
        // On matrix units without bf16 (lavapipe's), bf16 is refused by name: the bf16 case below.
        if (k == DType::bf16 && !coopmat_bf16_runs_here()) continue;
        check_product(config, {.form = detail::BmmForm::a_bt, .H = 2, .group = 2, .M = 19, .N = 35, .K = 64,
                               .a = k == DType::bf16 ? DType::bf16 : DType::f16, .b = k});
    }
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 64, .K = 27, .b = DType::q5_1, .out = DType::f16});
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 32, .K = 27, .b = DType::fp8_e5m2, .out = DType::bf16});
}

TEST_CASE("bmm coopmat: bf16 operands where A or B is bf16; f16 beside bf16 refused by name", "[gpu][bmm][coopmat][bf16]") {
    // bf16 A and B multiply as bf16 (fp32's range), 16 bytes at a time where rows allow (A·B, A·Bᵀ)
    // and through the typed loaders otherwise (Aᵀ·B, K off 8), beside f32 and quantized operands;
    // on matrix units that do not take bf16, refused by name (DeviceInfo::bf16_matrix_units_off).
    const detail::BmmConfig config = coopmat_config();
    const vk::DeviceCaps& caps = detail::ContextAccess::runtime(gpu_context()).device().caps();
    if (!caps.fp16_storage) return;  // 16-bit operands and outputs
    auto refusal = [&](const Product& p) {
        try {
            check_product(config, p);
            FAIL("taken");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "a");
            return std::string(e.what());
        }
        return std::string();
    };
    const Product bf{.form = detail::BmmForm::a_b, .H = 2, .M = 37, .N = 40, .K = 48, .a = DType::bf16, .b = DType::bf16,
                     .out = DType::bf16};
    if (!coopmat_bf16_runs_here()) {
        CHECK_THAT(refusal(bf), Catch::Contains("bf16_matrix_units_off"));
    } else {
        check_product(config, bf);
        check_product(config, {.form = detail::BmmForm::at_b, .M = 33, .N = 21, .K = 19, .a = DType::bf16, .b = DType::bf16});
        check_product(config, {.form = detail::BmmForm::a_bt, .M = 20, .N = 17, .K = 36, .b = DType::bf16, .out = DType::f16});
        check_product(config, {.form = detail::BmmForm::a_bt, .M = 20, .N = 33, .K = 64, .a = DType::bf16, .b = DType::q4_1});
    }
    CHECK_THAT(refusal({.form = detail::BmmForm::a_bt, .M = 16, .N = 16, .K = 16, .a = DType::f16, .b = DType::bf16}),
               Catch::Contains("f16 or bf16"));
}

TEST_CASE("bmm coopmat: the shapes (subgroups, accumulators, slice depths, buffers, 16-byte loads)", "[gpu][bmm][coopmat]") {
    // GemmShape's knobs, each shape at sizes off its tiles and slices (several 16-deep steps per
    // slice, several slices), in every form: f16 A and B with rows on 16 bytes take the 16-byte
    // loads (A·B, A·Bᵀ), the others the typed loaders. Shapes past this device's shared memory are
    // refused by name (the units' default, with fp32 operands, on lavapipe).
    const vk::DeviceCaps& caps = detail::ContextAccess::runtime(gpu_context()).device().caps();
    int ran = 0;
    for (const GemmShape shape : {GemmShape{2, 2, 2, 2, 16, 1, true},    // one buffer, two barriers per slice
                                  GemmShape{2, 4, 1, 1, 32, 2, true},    // 8 subgroups; C's tiles fill A's slices portably (apart on the units)
                                  GemmShape{1, 2, 2, 4, 16, 2, true},    // subgroups of 32 × 64
                                  GemmShape{1, 1, 4, 2, 48, 1, true},    // one subgroup, 3 steps per slice
                                  GemmShape{1, 4, 1, 1, 16, 1, false},   // C's tiles apart; the typed loaders
                                  GemmShape{2, 2, 4, 4, 32, 2, true}}) { // the units' default
        INFO(to_string(shape));
        detail::BmmConfig config;
        try {
            config = detail::choose_gemm(caps, 1, 1, 1, {.gemm_kernel = GemmKernel::coopmat, .gemm_shape = shape});
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "variant.gemm_shape");
            CHECK_THAT(e.what(), Catch::Contains(std::to_string(caps.max_shared_bytes)));
            continue;
        }
        ++ran;
        const bool wide = check_product(config, {.form = detail::BmmForm::a_b, .H = 2, .M = 150, .N = 88, .K = 104,
                                                 .a = DType::f16, .b = DType::f16})
                              .coopmat_wide;
        CHECK(wide == shape.wide);
        check_product(config, {.form = detail::BmmForm::a_bt, .B = 2, .H = 2, .group = 2, .M = 37, .N = 70, .K = 40,
                               .a = DType::f16, .b = DType::f16, .add = detail::BmmAdd::residual, .first_row = 5, .rows = 20,
                               .alpha = 0.5f});
        check_product(config, {.form = detail::BmmForm::at_b, .H = 2, .M = 131, .N = 77, .K = 41, .first_row = 3, .rows = 120});
    }
    CHECK(ran >= 5);  // all but the units' default fit 32 KiB with fp32 operands
}

TEST_CASE("bmm coopmat: K up to the device's loop budget, past it refused naming k", "[gpu][bmm][coopmat]") {
    // Mesa 22.3's llvmpipe ends a shader's loops after max_loop_iterations trips in all, silently;
    // the portable matrices loop per slot, so K's slices are what run out (coopmat_gemm_loops). The
    // longest K the count allows must still be right: were the count short, its last slices would go
    // missing and the product be wrong.
    const vk::DeviceCaps& caps = detail::ContextAccess::runtime(gpu_context()).device().caps();
    const detail::BmmConfig config = coopmat_config();
    std::int64_t k = 4096;
    if (caps.max_loop_iterations > 0) {
        const std::int64_t depth = config.coopmat_shape.depth, budget = detail::loop_budget(caps);
        k = (budget - detail::coopmat_gemm_loops(config, 0)) / (detail::coopmat_gemm_loops(config, depth) -
                                                                detail::coopmat_gemm_loops(config, 0)) * depth;
        INFO("K = " << k);
        REQUIRE(detail::coopmat_gemm_loops(config, k) <= budget);
        REQUIRE(detail::coopmat_gemm_loops(config, k + 1) > budget);
        try {
            detail::choose_gemm(caps, 20, 24, k + 1, {.gemm_kernel = GemmKernel::coopmat});
            FAIL("K past the budget taken");
        } catch (const ResourceLimit& e) {
            CHECK_THAT(std::string(e.what()), Catch::StartsWith("k: "));
        }
    }
    const detail::BmmConfig at_k = detail::choose_gemm(caps, 20, 24, k, {.gemm_kernel = GemmKernel::coopmat});
    check_product(at_k, {.form = detail::BmmForm::a_b, .M = 20, .N = 24, .K = k, .a = DType::f16, .b = DType::f16});
}

TEST_CASE("bmm coopmat: the attention paths refuse the GEMM's shape by name", "[gpu][bmm][coopmat]") {
    for (const Impl impl : {Impl::automatic, Impl::fused, Impl::unfused}) {
        testing::Case c;
        c.impl = impl;
        c.Nq = c.Nkv = 20;
        c.Dk = c.Dv = 16;
        c.variant.gemm_shape = GemmShape{};
        INFO(to_string(impl));
        CHECK_THAT(expect_refused(c, "variant.gemm_shape"), Catch::Contains("GEMM ceiling"));
    }
}

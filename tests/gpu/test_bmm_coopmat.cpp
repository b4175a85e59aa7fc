// bmm_coopmat.comp (issue #33): bmm.comp's contract on 16×16×16 cooperative matrices through
// common/coopmat.glsl, here its portable implementation (the suite's device has no matrix units, or
// no glslang that compiles them yet). Each form at sizes off its 64×64 tiles and 16-deep slices,
// GQA heads, chunks of rows, the addends, operand and output types, against a double-precision
// product of the operands rounded to f16 as the kernel rounds them.
#include <catch2/catch.hpp>

#include "support/bmm_product.hpp"

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
    CHECK(config.block_rows() == 32 * config.coopmat_tiles);
    CHECK(config.block_cols() == 32 * config.coopmat_tiles);
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
    for (const DType k : {DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::fp8_e4m3})
        check_product(config, {.form = detail::BmmForm::a_bt, .H = 2, .group = 2, .M = 19, .N = 35, .K = 64,
                               .a = k == DType::bf16 ? DType::bf16 : DType::f16, .b = k});
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 64, .K = 27, .b = DType::q5_1, .out = DType::f16});
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 32, .K = 27, .b = DType::fp8_e5m2, .out = DType::bf16});
}

TEST_CASE("bmm coopmat: the units' shapes (4 x 4 accumulators per subgroup, several 16-deep steps per slice)", "[gpu][bmm][coopmat]") {
    // choose_gemm gives the units 4 × 4 accumulators and 32-deep slices; here each shape runs on
    // whatever implementation this device has, within its shared memory.
    const detail::BmmConfig chosen = coopmat_config();
    const std::uint64_t shared = detail::ContextAccess::runtime(gpu_context()).device().caps().max_shared_bytes;
    const detail::BmmForm form = GENERATE(detail::BmmForm::a_bt, detail::BmmForm::a_b, detail::BmmForm::at_b);
    for (const auto& [tiles, depth] : {std::pair{4u, 16u}, std::pair{2u, 32u}, std::pair{4u, 32u}}) {
        detail::BmmConfig config = chosen;
        config.coopmat_tiles = tiles;
        config.coopmat_depth = depth;
        if (config.shared_bytes() > shared) continue;  // fp32 operands on lavapipe: 4 × 32 does not fit
        INFO(config.describe());
        CHECK(config.block_rows() == 32 * tiles);
        check_product(config, {.form = form, .B = 1, .H = 2, .M = 150, .N = 131, .K = 77});
        check_product(config, {.form = form, .H = 2, .group = 2, .M = 37, .N = 70, .K = 40, .add = detail::BmmAdd::residual,
                               .first_row = 5, .rows = 20, .alpha = 0.5f});
    }
}

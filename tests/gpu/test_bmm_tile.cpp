// bmm_tile.comp, the GPUs' matrix products, dispatched directly with each layout the tuning can
// give it (128×128 and 64×64 tiles) in each form (A·Bᵀ, A·B, Aᵀ·B), against a double-precision
// product of the operands' stored values: sizes off every tile and slice, GQA heads, a chunk of rows,
// every addend, the operand types the engine feeds it and every output type. The paths that use it
// (three stages, backward, projections) are tested forced in their own files.
#include "support/catch.hpp"

#include "support/bmm_product.hpp"

using namespace vkattn;
using namespace vkattn::test;

namespace {

// The tuning's tile configuration for a device with `invocations` per workgroup: 16×16 or 8×8.
detail::BmmConfig gemm_tile_config(std::uint32_t invocations) {
    vk::DeviceCaps caps = detail::ContextAccess::runtime(gpu_context()).device().caps();
    caps.kind = vk::DeviceKind::discrete;
    caps.max_workgroup_invocations = std::min(caps.max_workgroup_invocations, invocations);
    const detail::BmmConfig c = detail::choose_gemm(caps, 1, 1, 1, {.gemm_kernel = GemmKernel::tile});
    REQUIRE(c.tile);
    return c;
}

}  // namespace

TEST_CASE("bmm tile: every form at sizes off the tiles and slices, both layouts", "[gpu][bmm][tile]") {
    const std::uint32_t invocations = GENERATE(256u, 64u);
    const detail::BmmConfig config = gemm_tile_config(invocations);
    CHECK(config.block_rows() == (invocations >= 256 ? 128u : 64u));
    const detail::BmmForm form = GENERATE(detail::BmmForm::a_bt, detail::BmmForm::a_b, detail::BmmForm::at_b);
    // Several tiles each way with ragged edges, K a few slices and a part; then one element.
    check_product(config, {.form = form, .B = 1, .H = 2, .M = 150, .N = 133, .K = 21});
    check_product(config, {.form = form, .M = 1, .N = 1, .K = 1});
}

TEST_CASE("bmm tile: GQA heads, a chunk of rows, alpha and the addends", "[gpu][bmm][tile]") {
    const detail::BmmConfig config = gemm_tile_config(256);
    check_product(config, {.form = detail::BmmForm::a_bt, .B = 2, .H = 4, .group = 2, .M = 37, .N = 70, .K = 40,
                           .first_row = 5, .rows = 20, .alpha = 0.125f});
    check_product(config, {.form = detail::BmmForm::a_bt, .M = 70, .N = 33, .K = 9, .add = detail::BmmAdd::bias});
    check_product(config, {.form = detail::BmmForm::a_b, .H = 2, .M = 45, .N = 12, .K = 130, .add = detail::BmmAdd::residual});
    check_product(config, {.form = detail::BmmForm::at_b, .H = 2, .M = 131, .N = 20, .K = 17, .first_row = 64, .rows = 67});
}

TEST_CASE("bmm tile: the operand and output types the engine feeds it", "[gpu][bmm][tile]") {
    const detail::BmmConfig config = gemm_tile_config(256);
    // Scores: Q (f16, bf16) times K of any storage type, rows of 64 (block types need 32s).
    for (const DType k : {DType::f16, DType::bf16, DType::q8_0, DType::q4_1, DType::iq4_nl, DType::fp8_e4m3})
        check_product(config, {.form = detail::BmmForm::a_bt, .H = 2, .group = 2, .M = 19, .N = 35, .K = 64,
                               .a = k == DType::bf16 ? DType::bf16 : DType::f16, .b = k});
    // Outputs: P (f32) times V of a block type and fp8, into f16 and bf16.
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 64, .K = 27, .b = DType::q5_0, .out = DType::f16});
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 32, .K = 27, .b = DType::fp8_e5m2, .out = DType::bf16});
    // The 64x64 layout (devices of fewer invocations) on a block type and fp8, into f16, a chunk.
    check_product(gemm_tile_config(64), {.form = detail::BmmForm::a_bt, .H = 2, .M = 70, .N = 67, .K = 96, .a = DType::f16,
                                         .b = DType::q4_0, .out = DType::f16, .first_row = 3, .rows = 66});
    check_product(gemm_tile_config(64), {.form = detail::BmmForm::a_b, .M = 65, .N = 64, .K = 50, .b = DType::fp8_e4m3,
                                         .add = detail::BmmAdd::bias});
    // Odd f16 rows (no two-word loads).
    check_product(config, {.form = detail::BmmForm::a_bt, .M = 9, .N = 11, .K = 7, .a = DType::f16, .b = DType::f16});
    check_product(config, {.form = detail::BmmForm::at_b, .M = 9, .N = 11, .K = 7, .a = DType::f16, .b = DType::f16});
}

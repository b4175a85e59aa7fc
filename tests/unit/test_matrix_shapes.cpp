// Which cooperative-matrix shapes take the kernels' 16 × 16 × 16 matrices (vk/device_facts.hpp): a
// shape of that size, or a flexible one (VK_NV_cooperative_matrix2) whose granularities divide 16,
// only where flexible dimensions count; when a device must enable them; the tile in parts where no
// such shape is listed; and the workgroup sizes and granularities of the workgroup-scope shapes.
#include "support/catch.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "attention/coopmat_tile.hpp"
#include "vk/device_facts.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;

namespace {

CooperativeMatrixShape shape(std::uint32_t m, std::uint32_t n, std::uint32_t k, const char* operand, bool flexible = false,
                             std::uint32_t max_dimension = 0) {
    return {.m = m, .n = n, .k = k, .a = operand, .b = operand, .c = "f32", .result = "f32", .scope = "subgroup",
            .flexible = flexible, .max_dimension = max_dimension};
}


// A flexible f16 shape of VK_NV_cooperative_matrix2 with granularities m × n × k at `scope`.
CooperativeMatrixShape workgroup_shape(std::uint32_t m, std::uint32_t n, std::uint32_t k, const char* scope, std::uint32_t invocations,
                                       const char* result = "f32") {
    return {.m = m, .n = n, .k = k, .a = "f16", .b = "f16", .c = result, .result = result, .scope = scope,
            .flexible = true, .max_dimension = 256, .workgroup_invocations = invocations};
}
}  // namespace

TEST_CASE("matrix shapes: a 16x16x16 shape of its own, or a flexible one whose granularities divide 16", "[unit][coopmat]") {
    // NVIDIA's: 16 × 16 × 16 among others; no flexible dimensions needed.
    const std::vector<CooperativeMatrixShape> nvidia{shape(16, 8, 16, "f16"), shape(16, 16, 16, "f16"), shape(16, 16, 16, "bf16")};
    CHECK(vk::takes_f16_matrices(nvidia, false));
    CHECK(vk::takes_bf16_matrices(nvidia, false));
    CHECK_FALSE(vk::matrices_need_flexible_dimensions(nvidia, vk::f16_matrix_tile(nvidia)));

    // Mesa's lavapipe (26.1): 8 × 8 × 8 only, and flexible dimensions of granularity 8 up to 1,024.
    const std::vector<CooperativeMatrixShape> lavapipe{shape(8, 8, 8, "f16"), shape(8, 8, 8, "f16", true, 1024)};
    CHECK_FALSE(vk::takes_f16_matrices(lavapipe, false));
    CHECK(vk::takes_f16_matrices(lavapipe, true));
    CHECK_FALSE(vk::takes_bf16_matrices(lavapipe, true));
    CHECK(vk::matrices_need_flexible_dimensions(lavapipe, vk::f16_matrix_tile(lavapipe)));

    // A fixed 8 × 8 × 8 shape alone never takes them; nor flexible granularities that do not divide
    // 16, or whose largest dimension is below it.
    CHECK_FALSE(vk::takes_f16_matrices({shape(8, 8, 8, "f16")}, true));
    CHECK_FALSE(vk::takes_f16_matrices({shape(8, 8, 32, "f16", true, 1024)}, true));
    CHECK_FALSE(vk::takes_f16_matrices({shape(6, 8, 8, "f16", true, 1024)}, true));
    CHECK_FALSE(vk::takes_f16_matrices({shape(8, 8, 8, "f16", true, 8)}, true));
    CHECK(vk::takes_f16_matrices({shape(16, 16, 16, "f16", true, 16)}, true));

    // The scope, the accumulator and the saturation must be the kernels' as well.
    CooperativeMatrixShape workgroup = shape(8, 8, 8, "f16", true, 1024);
    workgroup.scope = "workgroup";
    CooperativeMatrixShape f16_accumulator = shape(8, 8, 8, "f16", true, 1024);
    f16_accumulator.c = f16_accumulator.result = "f16";
    CooperativeMatrixShape saturating = shape(16, 16, 16, "f16");
    saturating.saturating = true;
    CHECK_FALSE(vk::takes_f16_matrices({workgroup, f16_accumulator, saturating}, true));
    CHECK_FALSE(vk::matrices_need_flexible_dimensions({workgroup, f16_accumulator, saturating}, {}));
}

TEST_CASE("matrix shapes: the units' tile, 16x16 or the parts a device lists", "[unit][coopmat]") {
    using vk::MatrixTile;
    // NVIDIA's and AMD's 16 × 16 × 16: the kernels' own matrices.
    const std::vector<CooperativeMatrixShape> nvidia{shape(16, 8, 16, "f16"), shape(16, 16, 16, "f16")};
    CHECK(vk::f16_matrix_tile(nvidia) == MatrixTile{16, 16});
    CHECK_FALSE(vk::f16_matrix_tile(nvidia).parts());
    // Intel's Arc (DG2) lists 8 × 8 × 16, Xe2 8 × 16 × 16: each 16 × 16 matrix in parts of them.
    CHECK(vk::f16_matrix_tile({shape(8, 8, 16, "f16")}) == MatrixTile{8, 8});
    CHECK(vk::f16_matrix_tile({shape(8, 8, 16, "f16"), shape(8, 16, 16, "f16")}) == MatrixTile{8, 16});
    CHECK(vk::f16_matrix_tile({shape(8, 16, 16, "f16")}).parts());
    CHECK_FALSE(vk::matrices_need_flexible_dimensions({shape(8, 8, 16, "f16")}, MatrixTile{8, 8}));
    // Not 16 deep, rows or columns other than 8 and 16, other types: none.
    CHECK_FALSE(vk::f16_matrix_tile({shape(8, 8, 8, "f16")}).found());
    CHECK_FALSE(vk::f16_matrix_tile({shape(8, 8, 32, "f16")}).found());
    CHECK_FALSE(vk::f16_matrix_tile({shape(4, 8, 16, "f16")}).found());
    CHECK_FALSE(vk::f16_matrix_tile({shape(8, 8, 16, "bf16")}).found());
    // Forced ($VKATTN_MATRIX_TILE): that tile, where a shape takes it. Lavapipe's flexible
    // granularity 8 takes 8 × 8 × 16 parts, through its flexible dimensions.
    const std::vector<CooperativeMatrixShape> lavapipe{shape(8, 8, 8, "f16"), shape(8, 8, 8, "f16", true, 1024)};
    CHECK(vk::f16_matrix_tile(lavapipe) == MatrixTile{16, 16});
    CHECK(vk::f16_matrix_tile(lavapipe, true, MatrixTile{8, 8}) == MatrixTile{8, 8});
    CHECK(vk::f16_matrix_tile(lavapipe, true, MatrixTile{8, 16}) == MatrixTile{8, 16});
    CHECK_FALSE(vk::f16_matrix_tile(lavapipe, false, MatrixTile{8, 8}).found());
    CHECK(vk::matrices_need_flexible_dimensions(lavapipe, MatrixTile{8, 8}));
    CHECK_FALSE(vk::f16_matrix_tile(nvidia, true, MatrixTile{8, 8}).found());
    CHECK(vk::f16_matrix_tile(nvidia, true, MatrixTile{16, 16}) == MatrixTile{16, 16});
}

TEST_CASE("matrix shapes: the kernels' build for the units' tile", "[unit][coopmat]") {
    using vk::MatrixTile;
    using detail::coopmat_build;
    CHECK(coopmat_build(true, DType::f16) == "coopmat_units");
    CHECK(coopmat_build(true, DType::f16, MatrixTile{8, 8}) == "coopmat_units_parts");
    CHECK(coopmat_build(true, DType::f16, MatrixTile{8, 16}) == "coopmat_units_parts");
    CHECK(detail::coopmat_parts(true, DType::f16, MatrixTile{16, 8}));
    // bf16 operands need a 16 × 16 × 16 bf16 shape (no parts build); the portable builds have no tile.
    CHECK(coopmat_build(true, DType::bf16, MatrixTile{8, 8}) == "coopmat_units_bf16");
    CHECK(coopmat_build(false, DType::f16, MatrixTile{8, 8}) == "coopmat");
    CHECK_FALSE(detail::coopmat_parts(true, DType::f16, MatrixTile{16, 16}));
}

TEST_CASE("workgroup matrices: the workgroup sizes a device's shapes offer, and their granularities", "[unit][coopmat][workgroup]") {
    const std::vector<CooperativeMatrixShape> shapes{
        {.m = 16, .n = 16, .k = 16, .a = "f16", .b = "f16", .c = "f32", .result = "f32", .scope = "subgroup"},
        workgroup_shape(32, 16, 16, "workgroup", 128), workgroup_shape(32, 32, 16, "workgroup", 256),  // NVIDIA's
        workgroup_shape(16, 16, 16, "workgroup", 512, "f16"),  // f16 accumulators: not the kernels'
        workgroup_shape(32, 32, 32, "workgroup", 64), workgroup_shape(16, 16, 16, "workgroup", 64),  // two: the finer kept
        workgroup_shape(8, 8, 8, "subgroup", 0),               // lavapipe's: subgroup scope
        workgroup_shape(16, 16, 16, "workgroup", 96),          // not a power of two
    };
    const vk::WorkgroupGranularities g = vk::workgroup_matrix_granularities(shapes);
    CHECK(vk::offers_workgroup_matrices(g));
    for (std::uint32_t i = 0; i < g.size(); ++i) {
        INFO((1u << i) << " invocations");
        CHECK(g[i].offered() == (i == 6 || i == 7 || i == 8));
    }
    CHECK((g[7].m == 32 && g[7].n == 16 && g[7].k == 16));
    CHECK((g[8].m == 32 && g[8].n == 32 && g[8].k == 16));
    CHECK((g[6].m == 16 && g[6].n == 16 && g[6].k == 16));
    CHECK(vk::granularity_at(g, 128) == &g[7]);
    CHECK(vk::granularity_at(g, 96) == nullptr);
    CHECK(vk::granularity_at(g, 512) == nullptr);
    CHECK_FALSE(vk::offers_workgroup_matrices(vk::workgroup_matrix_granularities({shapes[0], shapes[6]})));
    // bf16 operands' shapes count for bf16 alone (llama.cpp's coopmat2 check asks for both at 128
    // and 256 invocations on NVIDIA).
    CooperativeMatrixShape bf16 = workgroup_shape(32, 16, 16, "workgroup", 128);
    bf16.a = bf16.b = "bf16";
    CHECK_FALSE(vk::offers_workgroup_matrices(vk::workgroup_matrix_granularities(shapes, "bf16")));
    const vk::WorkgroupGranularities b = vk::workgroup_matrix_granularities({shapes[0], bf16}, "bf16");
    CHECK((b[7].m == 32 && b[7].n == 16 && b[7].k == 16));
    CHECK_FALSE(vk::offers_workgroup_matrices(vk::workgroup_matrix_granularities({shapes[0], bf16})));
}

TEST_CASE("matrix shapes: $VKATTN_MATRIX_TILE names a tile, or is refused by name", "[unit][coopmat]") {
    const char* before = std::getenv("VKATTN_MATRIX_TILE");
    const std::string kept = before ? before : "";
    ::setenv("VKATTN_MATRIX_TILE", "8x16", 1);
    CHECK(vk::forced_matrix_tile() == vk::MatrixTile{8, 16});
    ::setenv("VKATTN_MATRIX_TILE", "", 1);
    CHECK_FALSE(vk::forced_matrix_tile().found());
    ::setenv("VKATTN_MATRIX_TILE", "4x8", 1);
    try {
        (void)vk::forced_matrix_tile();
        FAIL("4x8 taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "VKATTN_MATRIX_TILE");
        CHECK_THAT(e.what(), Catch::Contains("4x8") && Catch::Contains("8x16"));
    }
    if (before) ::setenv("VKATTN_MATRIX_TILE", kept.c_str(), 1);
    else ::unsetenv("VKATTN_MATRIX_TILE");
}

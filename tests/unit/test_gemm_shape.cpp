// The cooperative-matrix GEMM's shapes (GemmShape, bmm_coopmat.comp; docs/design/GPU_KERNELS.md "The
// GEMM's shapes"): their text form, the defaults, the shared memory each declares, the refusals by
// name, the portable K's loop budget, the 16-byte loads' rule, and the attention paths' refusal of the knob.
#include "support/catch.hpp"

#include <optional>
#include <string>

#include "attention/tuning.hpp"
#include "fake_devices.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

namespace {

BmmConfig gemm_with(const vk::DeviceCaps& caps, std::optional<GemmShape> shape) {
    return choose_gemm(caps, 4096, 4096, 4096, {.gemm_kernel = GemmKernel::coopmat, .gemm_shape = shape});
}

vk::DeviceCaps units_device() {
    vk::DeviceCaps caps = nvidia_like();
    caps.matrix_units = true;
    return caps;
}

// A dense [1, 1, rows, row_length] tensor's description, its rows `stride` apart from `origin`.
TensorDesc rows_desc(std::uint32_t stride, std::uint32_t origin = 0) {
    TensorDesc d;
    d.stride = {stride * 64, stride * 64, stride, 1};
    d.origin = {0, 0, 0, origin};
    return d;
}

}  // namespace

TEST_CASE("gemm shape: the text form and its parser", "[unit][tuning][gemm]") {
    CHECK(to_string(GemmShape{}) == "2x2,4x4,32,2");
    CHECK(to_string(GemmShape{1, 8, 2, 1, 48, 1, false}) == "1x8,2x1,48,1,words");
    for (const GemmShape shape : {GemmShape{}, GemmShape{1, 8, 2, 1, 48, 1, false}, GemmShape{16, 1, 1, 16, 128, 2, true}})
        CHECK(parse_gemm_shape(to_string(shape)) == shape);
    for (const char* bad : {"", "2x2", "2x2,4x4,32", "2x2,4x4,32,", "2x2,4x4,32,2,", "2x2,4x4,32,2,wide", "2x2,4x4,32,2 ",
                            "2,2,4x4,32,2", "-1x2,4x4,32,2", "2x2;4x4;32;2", "ax2,4x4,32,2", "2x2,4x4,32,2,words,"}) {
        INFO("'" << bad << "'");
        CHECK_FALSE(parse_gemm_shape(bad).has_value());
    }
}

TEST_CASE("gemm shape: the defaults and the shared memory each shape declares", "[unit][tuning][gemm]") {
    // The units: 2 × 2 subgroups of 4 × 4 accumulators, 128 × 128 tiles, 32-deep slices of f16 in
    // two buffers: 2 · 2 · 128 · (32 + 8) bytes each for A and B; C's four 16 × 20 fp32 tiles fit
    // in A's slices (its own tile a 16-byte placeholder).
    const BmmConfig units = gemm_with(units_device(), std::nullopt);
    CHECK(units.units);
    CHECK(units.coopmat_shape == GemmShape{});
    CHECK(units.block_rows() == 128);
    CHECK(units.block_cols() == 128);
    CHECK(units.subgroups() == 4);
    CHECK(units.shared_bytes() == 40960 + 16);
    CHECK_THAT(units.describe(), Catch::Contains("2x2,4x4,32,2") && Catch::Contains("128x128x32"));
    // Portably: 2 × 2 subgroups of 2 × 2, 64 × 64 tiles, 16 deep, fp32 operands: 2 · 4 · 64 · 24
    // bytes each.
    const BmmConfig portable = gemm_with(lavapipe_like(), std::nullopt);
    CHECK_FALSE(portable.units);
    CHECK(portable.coopmat_shape == GemmShape{2, 2, 2, 2, 16, 2, true});
    CHECK(portable.block_rows() == 64);
    CHECK(portable.shared_bytes() == 24576 + 16);
    // 8 subgroups of 4 × 2 (128 × 128): C's eight tiles (10,240 bytes) still fit in A's slices.
    const BmmConfig eight = gemm_with(units_device(), GemmShape{2, 4, 4, 2, 32, 2, true});
    CHECK(eight.block_rows() == 128);
    CHECK(eight.block_cols() == 128);
    CHECK(eight.shared_bytes() == 40960 + 16);
    // One buffer of 64-deep slices, each as large as either form needs: 128 · 72 elements (A's rows,
    // or Bᵀ's; A·B's 64 · 136 are fewer).
    CHECK(gemm_with(units_device(), GemmShape{2, 2, 4, 4, 64, 1, true}).shared_bytes() == 2 * (128 * 72 + 128 * 72) + 16);
    // A row of 16 × 16 tiles: A's one slice (16 · 24 f16 = 768 bytes) cannot take C's four tiles
    // (5,120 bytes), which then have their own.
    CHECK(gemm_with(units_device(), GemmShape{1, 4, 1, 1, 16, 1, true}).shared_bytes() == 768 + 2 * 64 * 24 + 5120);
    // Rectangular subgroups' tiles: 32 × 64 per subgroup, 64 × 128 per workgroup.
    const BmmConfig wide_n = gemm_with(units_device(), GemmShape{2, 2, 2, 4, 32, 2, true});
    CHECK(wide_n.block_rows() == 64);
    CHECK(wide_n.block_cols() == 128);
}

TEST_CASE("gemm shape: shapes a device cannot take are refused by name", "[unit][tuning][gemm]") {
    const vk::DeviceCaps caps = units_device();
    const auto refused = [&](const GemmShape& shape, const std::string& says) {
        INFO(to_string(shape));
        try {
            gemm_with(caps, shape);
            FAIL("taken");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "variant.gemm_shape");
            CHECK_THAT(e.what(), Catch::Contains(to_string(shape)) && Catch::Contains(says));
        }
    };
    refused({0, 2, 4, 4, 32, 2, true}, "1 to 16");
    refused({268435456, 16, 1, 1, 16, 2, true}, "1 to 16");  // whose product wraps to 0 in 32 bits
    refused({2, 2, 65536, 65536, 16, 2, true}, "1 to 16");
    refused({4, 5, 1, 1, 32, 2, true}, "1 to 16");
    refused({2, 2, 0, 4, 32, 2, true}, "1 to 16");
    refused({2, 2, 8, 4, 32, 2, true}, "1 to 16");
    refused({2, 2, 4, 4, 0, 2, true}, "multiple of 16");
    refused({2, 2, 4, 4, 24, 2, true}, "multiple of 16");
    refused({2, 2, 4, 4, 144, 2, true}, "multiple of 16");
    refused({2, 2, 4, 4, 32, 0, true}, "1 or 2");
    refused({2, 2, 4, 4, 32, 3, true}, "1 or 2");
    refused({2, 2, 8, 2, 128, 2, true}, "bytes of shared memory");  // 2 · 2 · 256 · 136 bytes of A alone
    vk::DeviceCaps few = caps;
    few.max_workgroup_invocations = 256;
    try {
        gemm_with(few, GemmShape{4, 4, 1, 1, 16, 2, true});  // 16 subgroups of 32 lanes
        FAIL("taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.gemm_shape");
        CHECK_THAT(e.what(), Catch::Contains("512") || Catch::Contains("16 subgroups"));
    }
    // Unforced, smaller devices get the first shape that fits: one buffer at 32 KiB (20,496 bytes),
    // 64 × 64 tiles at 16 KiB; below that the kernel's refusal, as before the knob.
    vk::DeviceCaps small = caps;
    small.max_shared_bytes = 32768;
    CHECK(gemm_with(small, std::nullopt).coopmat_shape == GemmShape{2, 2, 4, 4, 32, 1, true});
    small.max_shared_bytes = 16384;
    CHECK(gemm_with(small, std::nullopt).coopmat_shape == GemmShape{2, 2, 2, 2, 16, 2, true});
    small.max_shared_bytes = 8192;
    try {
        gemm_with(small, std::nullopt);
        FAIL("taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.gemm_kernel");
        CHECK_THAT(e.what(), Catch::Contains("2x2,2x2,16,1") && Catch::Contains("8192"));
    }
    // Every shape that fits runs as named.
    for (const GemmShape shape : {GemmShape{1, 1, 1, 1, 16, 1, true}, GemmShape{4, 2, 2, 4, 64, 1, false}, GemmShape{1, 16, 1, 1, 16, 2, true}}) {
        INFO(to_string(shape));
        CHECK(gemm_with(caps, shape).coopmat_shape == shape);
    }
}

TEST_CASE("gemm shape: the portable matrices' K within a device's loop budget, or refused naming k", "[unit][tuning][gemm]") {
    // Lavapipe's portable default, 2x2,2x2,16,2 on 4 subgroups of 8, as llvmpipe counts (a loop of n
    // trips n + 1, a loop no lane runs 1). Per 16-deep slice: its own trip, A's and B's 4 chunks
    // fetched and stored (4 × (4 + 1)), and the step: 2 + A's loads (2 + 1) + the columns
    // (2 + 1 + 2 × (2 + 1 + 2 × (32 + 1) + 1) + 2) + 4 = 154; 175 in all. Before and after: the first
    // slice (20), the pass that ends the loop (1 + its 9 loops), C's 4 tiles (5 + 4 × 33 + 1); the
    // last slice's masked fetch and store counted in full (an over-count of 16). Measured on Mesa
    // 22.3: K = 5,968 (373 slices, 65,443 counted) right, 5,984 (374, 65,618) wrong.
    vk::DeviceCaps cpu = lavapipe_like();
    const auto gemm_k = [&](std::int64_t k) {
        return choose_gemm(cpu, 64, 64, k, {.gemm_kernel = GemmKernel::coopmat});
    };
    const BmmConfig c = gemm_k(2048);
    REQUIRE(c.coopmat_shape == GemmShape{2, 2, 2, 2, 16, 2, true});
    CHECK(coopmat_gemm_loops(c, 5968) == 20 + 373 * 175 + 10 + 5 + 4 * 33 + 1);
    CHECK(coopmat_gemm_loops(c, 5968) <= 65535);
    CHECK(coopmat_gemm_loops(c, 5984) > 65535);
    // The two one-subgroup shapes measured alike: 16 deep, 948 slices right and 950 wrong (69 a
    // slice); 32 deep, 511 right and 512 wrong (128 a slice).
    for (const auto& [shape, right, wrong] : {std::tuple{GemmShape{1, 1, 1, 1, 16, 1, true}, 15168, 15200},
                                              std::tuple{GemmShape{1, 1, 1, 1, 32, 1, true}, 16352, 16384}}) {
        INFO(to_string(shape));
        const BmmConfig one = choose_gemm(cpu, 64, 64, 64, {.gemm_kernel = GemmKernel::coopmat, .gemm_shape = shape});
        CHECK(coopmat_gemm_loops(one, right) <= 65535);
        CHECK(coopmat_gemm_loops(one, wrong) > 65535);
    }
    // Mesa 22.3's 65,535 trips, 58,977 of budget: 336 slices, K ≤ 5,376. Without a budget, any K.
    CHECK(gemm_k(1 << 20).coopmat);
    cpu.max_loop_iterations = 65535;
    CHECK(gemm_k(5376).coopmat);
    CHECK_THROWS_MATCHES(gemm_k(5377), ResourceLimit, Catch::Predicate<ResourceLimit>([](const ResourceLimit& e) {
                             return std::string(e.what()).rfind("k: K = 5377", 0) == 0;
                         }));
    CHECK_THROWS_AS(choose_gemm(cpu, 64, 64, 5377, {.gemm_kernel = GemmKernel::coopmat, .gemm_shape = c.coopmat_shape}), ResourceLimit);
    // On the matrix units the kernel's loops unroll but the slices' and C's stores' (4 × 4
    // accumulators of 256 / 32 lanes): 32-deep slices up to K = 32 · (58,977 − 1 − 162).
    vk::DeviceCaps units = units_device();
    const BmmConfig u = choose_gemm(units, 64, 64, 4096, {.gemm_kernel = GemmKernel::coopmat});
    CHECK(coopmat_gemm_loops(u, 4096) == 129 + 17 + 16 * 9 + 1);
    units.max_loop_iterations = 65535;
    CHECK(choose_gemm(units, 64, 64, 32 * 58814, {.gemm_kernel = GemmKernel::coopmat}).units);
    CHECK_THROWS_AS(choose_gemm(units, 64, 64, 32 * 58814 + 1, {.gemm_kernel = GemmKernel::coopmat}), ResourceLimit);
}

TEST_CASE("gemm shape: 16-byte loads where A and B are f16 with rows on 16 bytes, along K or N", "[unit][tuning][gemm]") {
    const BmmConfig c = gemm_with(units_device(), std::nullopt);
    const TensorDesc rows64 = rows_desc(64), rows40 = rows_desc(40), rows36 = rows_desc(36);
    // A·B: A's rows run along K, B's along N.
    CHECK(coopmat_wide_operands(c, BmmForm::a_b, DType::f16, DType::f16, rows40, rows64, 64, 40));
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::a_b, DType::f16, DType::f16, rows40, rows64, 64, 36));  // K off 8
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::a_b, DType::f16, DType::f16, rows40, rows64, 36, 40));  // N off 8
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::a_b, DType::f16, DType::f16, rows36, rows64, 64, 32));  // A's rows off 16 bytes
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::a_b, DType::f16, DType::f16, rows40, rows36, 32, 40));  // B's
    // A·Bᵀ: both along K; N may be anything.
    CHECK(coopmat_wide_operands(c, BmmForm::a_bt, DType::f16, DType::f16, rows40, rows40, 37, 40));
    // Aᵀ·B never (its chunks would run along C's rows, which a chunk of rows may cut).
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::at_b, DType::f16, DType::f16, rows64, rows64, 64, 64));
    // f16 only; rows on 16 bytes only; the shape may decline.
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::a_b, DType::f32, DType::f16, rows40, rows64, 64, 40));
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::a_b, DType::f16, DType::bf16, rows40, rows64, 64, 40));
    CHECK_FALSE(coopmat_wide_operands(c, BmmForm::a_b, DType::f16, DType::f16, rows_desc(40, 4), rows64, 64, 40));
    BmmConfig words = c;
    words.coopmat_shape.wide = false;
    CHECK_FALSE(coopmat_wide_operands(words, BmmForm::a_b, DType::f16, DType::f16, rows40, rows64, 64, 40));
    BmmConfig other = c;
    other.coopmat = false;
    CHECK_FALSE(coopmat_wide_operands(other, BmmForm::a_b, DType::f16, DType::f16, rows40, rows64, 64, 40));
}

TEST_CASE("gemm shape: the products and the backward refuse the GEMM ceiling's knob", "[unit][tuning][gemm]") {
    for (const vk::DeviceCaps& caps : all_devices()) {
        INFO(caps.name);
        const VariantOverrides shaped{.gemm_shape = GemmShape{}};
        try {
            choose_product(caps, {DType::f16}, true, 1 << 20, BmmForm::a_bt, shaped);
            FAIL("taken");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "variant.gemm_shape");
        }
        const Problem p = problem(1, 8, 8, 256, 256, 64, 64);
        const auto dense = bhnd(8, 256, 64);
        try {
            choose_backward(caps, p, dense, dense, dense, dense, shaped, nullptr);
            FAIL("taken");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "variant.gemm_shape");
        }
    }
}

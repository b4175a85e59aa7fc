// The products' kernel choice (BmmConfig, GemmKernel): bmm.comp's register blocks on CPU devices,
// bmm_tile.comp on GPUs, on every made-up device (fake_devices.hpp), in every form.
#include "support/catch.hpp"

#include "fake_devices.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

TEST_CASE("gemm tuning: GPUs take bmm_tile.comp in every form, CPU devices bmm.comp", "[unit][tuning][gemm]") {
    for (const vk::DeviceCaps& caps : all_devices()) {
        INFO(caps.name);
        const bool cpu = caps.kind == vk::DeviceKind::cpu;
        for (const BmmForm form : {BmmForm::a_bt, BmmForm::a_b, BmmForm::at_b}) {
            const BmmConfig c = choose_product(caps, {DType::f32}, true, 1 << 20, form, {});
            CHECK(c.tile == !cpu);
            if (!c.tile) continue;
            CHECK_FALSE(c.texel);  // words only
            CHECK_FALSE(c.shared_tiles);
            CHECK(c.tm == 8);
            CHECK(c.tn4 == 2);
            CHECK(c.wg_m * c.wg_n <= caps.max_workgroup_invocations);
            CHECK(c.shared_bytes() <= caps.max_shared_bytes);
            CHECK(c.shared_bytes() == 2 * 8 * (c.block_rows() / 4 + 1 + c.block_cols() / 4 + 1) * 16);
            // 128×128 tiles where 256 invocations fit, 64×64 otherwise.
            CHECK(c.block_rows() == (caps.max_workgroup_invocations >= 256 ? 128u : 64u));
            CHECK(c.describe() == "tile " + std::to_string(c.wg_m) + "x" + std::to_string(c.wg_n) + "/8x8");
        }
        CHECK(choose_gemm(caps, 8192, 8192, 8192, {}).tile == !cpu);
    }
}

TEST_CASE("gemm tuning: the kernel can be forced either way on every device", "[unit][tuning][gemm]") {
    for (const vk::DeviceCaps& caps : all_devices()) {
        INFO(caps.name);
        const BmmConfig tile = choose_gemm(caps, 100, 100, 100, {.gemm_kernel = GemmKernel::tile});
        CHECK(tile.tile);
        const BmmConfig blocks = choose_gemm(caps, 100, 100, 100, {.gemm_kernel = GemmKernel::blocks});
        CHECK_FALSE(blocks.tile);
        // bmm.comp's knobs ask for it; an explicit gemm_kernel still wins.
        CHECK_FALSE(choose_gemm(caps, 100, 100, 100, {.shared_tiles = false}).tile);
        CHECK_FALSE(choose_gemm(caps, 100, 100, 100, {.texel_loads = true}).tile);
        CHECK(choose_gemm(caps, 100, 100, 100, {.shared_tiles = true, .gemm_kernel = GemmKernel::tile}).tile);
        // A transposed A stays on the tile kernel (it stages Aᵀ's rows as they lie) and on bmm.comp
        // takes rows in fours without shared tiles.
        CHECK(choose_product(caps, {DType::f32}, true, 1 << 20, BmmForm::at_b, {.gemm_kernel = GemmKernel::tile}).tile);
        const BmmConfig at_b = choose_product(caps, {DType::f32}, true, 1 << 20, BmmForm::at_b, {.gemm_kernel = GemmKernel::blocks});
        CHECK_FALSE(at_b.shared_tiles);
        CHECK(at_b.tm % 4 == 0);
    }
}

TEST_CASE("gemm tuning: a device with few invocations gets 64x64 tiles", "[unit][tuning][gemm]") {
    vk::DeviceCaps small = nvidia_like();
    small.max_workgroup_invocations = 128;
    const BmmConfig c = choose_gemm(small, 4096, 4096, 4096, {});
    CHECK(c.tile);
    CHECK(c.wg_m * c.wg_n == 64);
    CHECK(c.block_cols() == 64);
}

TEST_CASE("gemm tuning: the cooperative-matrix products serve the GEMM ceiling and nothing else yet", "[unit][tuning][gemm]") {
    for (const vk::DeviceCaps& caps : all_devices()) {
        INFO(caps.name);
        const BmmConfig c = choose_gemm(caps, 4096, 4096, 4096, {.gemm_kernel = GemmKernel::coopmat});
        CHECK(c.coopmat);
        CHECK(c.block_rows() == 64);
        CHECK(c.subgroup >= 8);
        CHECK(c.subgroups() * c.subgroup <= caps.max_workgroup_invocations);
        CHECK(c.shared_bytes() <= caps.max_shared_bytes);
        // The attention paths and the projections refuse it by name.
        try {
            choose_product(caps, {DType::f16}, true, 1 << 20, BmmForm::a_bt, {.gemm_kernel = GemmKernel::coopmat});
            FAIL("taken");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "variant.gemm_kernel");
        }
        // Never chosen.
        CHECK_FALSE(choose_gemm(caps, 4096, 4096, 4096, {}).coopmat);
    }
}

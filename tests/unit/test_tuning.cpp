// The tuning function is pure: drive it with made-up devices.
#include <catch2/catch.hpp>

#include "attention/tuning.hpp"

using namespace vkattn;
using namespace vkattn::detail;

namespace {

vk::DeviceCaps lavapipe_like() {
    vk::DeviceCaps c;
    c.kind = vk::DeviceKind::cpu;
    c.subgroup_size = 8;
    c.subgroup_arithmetic = true;
    c.max_shared_bytes = 32768;
    c.max_workgroup_invocations = 1024;
    c.texel_rgba32f = c.texel_rgba16f = true;
    return c;
}

vk::DeviceCaps gpu_like() {
    vk::DeviceCaps c = lavapipe_like();
    c.kind = vk::DeviceKind::discrete;
    c.subgroup_size = 32;
    c.max_shared_bytes = 49152;
    return c;
}

Problem shape(std::int64_t nkv, std::int64_t d) {
    Problem p;
    p.B = 1;
    p.Hq = p.Hkv = 8;
    p.Nq = 128;
    p.Nkv = nkv;
    p.Dk = p.Dv = d;
    return p;
}

const std::array<std::int64_t, 4> dense{8 * 128 * 64, 128 * 64, 64, 1};

}  // namespace

TEST_CASE("tuning: CPU devices get register blocking, GPUs shared tiles", "[unit][tuning]") {
    const auto cpu = choose_unfused(lavapipe_like(), shape(128, 64), dense, dense, dense, {});
    CHECK_FALSE(cpu.scores.shared_tiles);
    CHECK(cpu.scores.texel);
    CHECK(cpu.scores.tm * cpu.scores.tn4 * 4 == 64);
    const auto gpu = choose_unfused(gpu_like(), shape(128, 64), dense, dense, dense, {});
    CHECK(gpu.scores.shared_tiles);
    CHECK((gpu.scores.block_rows() + gpu.scores.block_cols()) * gpu.scores.ks4 * 16 <= 49152);
}

TEST_CASE("tuning: unaligned rows fall back to scalar loads, per stage", "[unit][tuning]") {
    const auto c = choose_unfused(lavapipe_like(), shape(127, 64), dense, dense, dense, {});
    CHECK(c.scores.texel);       // Dk = 64 is 4-aligned
    CHECK_FALSE(c.output.texel);  // P rows of Nkv = 127 are not
    const auto d = choose_unfused(lavapipe_like(), shape(128, 28), dense, dense, dense, {});
    CHECK(d.scores.texel);
    const std::array<std::int64_t, 4> odd{8 * 128 * 30, 128 * 30, 30, 1};
    CHECK_FALSE(choose_unfused(lavapipe_like(), shape(128, 30), odd, odd, odd, {}).scores.texel);
}

TEST_CASE("tuning: overrides force each variant where the device allows it", "[unit][tuning]") {
    const auto forced = choose_unfused(lavapipe_like(), shape(128, 64), dense, dense, dense,
                                       {.texel_loads = false, .shared_tiles = true, .subgroup_ops = false});
    CHECK_FALSE(forced.scores.texel);
    CHECK(forced.scores.shared_tiles);
    CHECK_FALSE(forced.softmax.subgroup_ops);
    vk::DeviceCaps no_subgroups = lavapipe_like();
    no_subgroups.subgroup_arithmetic = false;
    CHECK_FALSE(choose_unfused(no_subgroups, shape(128, 64), dense, dense, dense, {.subgroup_ops = true})
                    .softmax.subgroup_ops);
    vk::DeviceCaps tiny = gpu_like();
    tiny.max_shared_bytes = 2048;
    const auto small = choose_unfused(tiny, shape(128, 64), dense, dense, dense, {});
    CHECK((small.scores.block_rows() + small.scores.block_cols()) * small.scores.ks4 * 16 <= 2048);
}

// The tuning function is pure: drive it with made-up devices.
#include "support/catch.hpp"

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention/tuning.hpp"
#include "fake_devices.hpp"

using namespace vkattn;
using namespace vkattn::detail;

namespace {

using namespace fake;

const std::array<std::int64_t, 4> dense{8 * 128 * 64, 128 * 64, 64, 1};

}  // namespace

TEST_CASE("tuning: CPU devices get register blocking, GPUs bmm_tile.comp or shared tiles", "[unit][tuning]") {
    const auto cpu = choose_unfused(lavapipe_like(), shape(128, 64), dense, dense, dense, {});
    CHECK_FALSE(cpu.scores.tile);
    CHECK_FALSE(cpu.scores.shared_tiles);
    CHECK(cpu.scores.texel);
    CHECK(cpu.scores.tm * cpu.scores.tn4 * 4 == 64);
    const auto gpu = choose_unfused(nvidia_like(), shape(128, 64), dense, dense, dense, {});
    CHECK(gpu.scores.tile);
    CHECK(gpu.output.tile);
    // bmm.comp on a GPU when one of its knobs is asked for: shared tiles there.
    const auto blocks = choose_unfused(nvidia_like(), shape(128, 64), dense, dense, dense, {.gemm_kernel = GemmKernel::blocks});
    CHECK_FALSE(blocks.scores.tile);
    CHECK(blocks.scores.shared_tiles);
    CHECK(blocks.scores.shared_bytes() <= 49152);
    CHECK_FALSE(choose_unfused(nvidia_like(), shape(128, 64), dense, dense, dense, {.shared_tiles = true}).scores.tile);
    CHECK_FALSE(choose_unfused(nvidia_like(), shape(128, 64), dense, dense, dense, {.texel_loads = true}).scores.tile);
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
    vk::DeviceCaps tiny = nvidia_like();
    tiny.max_shared_bytes = 2048;
    for (const VariantOverrides& knobs : {VariantOverrides{.shared_tiles = true}, VariantOverrides{}}) {
        const auto small = choose_unfused(tiny, shape(128, 64), dense, dense, dense, knobs);
        CHECK(small.scores.shared_bytes() <= 2048);  // no tile kernel fits: bmm.comp with smaller slices
        CHECK_FALSE(small.scores.tile);
    }
}

TEST_CASE("tuning: the fused kernels read every storage type through texel views, of words where not float", "[unit][tuning]") {
    const DType word_types[] = {DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                                DType::iq4_nl, DType::fp8_e4m3, DType::fp8_e5m2};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const DType t : word_types) {
            INFO(caps.name << " " << to_string(t));
            Problem p = problem(1, 8, 2, 1, 4096, 128, 128, DType::f16);
            p.v_dtype = t;  // one operand that no float view reads makes them all views of words
            const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::flash});  // flash.comp (GPUs decode in their own)
            CHECK(c->texel);
            CHECK(c->texel_words);
            CHECK_THAT(c->describe(), Catch::StartsWith("fused[texel-words "));
            CHECK_FALSE(fused_for(caps, p, {.texel_loads = false})->texel);
            vk::DeviceCaps no_words = caps;
            no_words.texel_r32ui = false;
            CHECK_FALSE(fused_for(no_words, p, {.fused_kernel = FusedKernel::flash})->texel);
        }
    // Float operands keep their float views; rows that do not start on 4 elements read words.
    const auto floats = fused_for(lavapipe_like(), problem(1, 8, 2, 1, 4096, 128, 128, DType::f16));
    CHECK(floats->texel);
    CHECK_FALSE(floats->texel_words);
    Problem odd = problem(1, 8, 2, 1, 4096, 128, 30);
    odd.k_dtype = odd.v_dtype = DType::bf16;
    CHECK_FALSE(fused_for(lavapipe_like(), odd)->texel);
}

TEST_CASE("tuning: choose_fused gives every device a layout it can run, for every head size", "[unit][tuning]") {
    const std::int64_t dims[] = {1, 3, 4, 28, 64, 80, 128, 130, 192, 256, 320, 509, 512};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const DType dtype : {DType::f32, DType::f16})
            for (const auto& [hq, hkv] : {std::pair<std::int64_t, std::int64_t>{8, 8}, {32, 8}, {8, 1}})
                for (const std::int64_t nq : {1, 4096})
                    for (const std::int64_t dk : dims)
                        for (const std::int64_t dv : dims) {
                            INFO(caps.name << " " << to_string(dtype) << " Hq=" << hq << " Hkv=" << hkv << " Nq=" << nq
                                           << " Dk=" << dk << " Dv=" << dv);
                            Problem p = problem(1, hq, hkv, nq, 100, dk, dv, dtype);
                            p.k_dtype = p.v_dtype = dtype;
                            std::string why;
                            // flash.comp's layout (GPUs decode in flash_decode.comp: test_decode_tuning.cpp).
                            const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::flash}, &why);
                            INFO(why);
                            REQUIRE(c);
                            INFO(c->describe());
                            // A subgroup size the device runs: its only one, or one it can be told to use.
                            if (caps.subgroup_size_control) {
                                CHECK(c->require_subgroup);
                                CHECK(c->subgroup >= caps.min_subgroup_size);
                                CHECK(c->subgroup <= caps.max_subgroup_size);
                            } else {
                                CHECK_FALSE(c->require_subgroup);
                                CHECK(c->subgroup == caps.subgroup_size);
                            }
                            CHECK(c->subgroups * c->subgroup <= caps.max_workgroup_invocations);
                            CHECK(c->rows >= 1);
                            CHECK(c->keys_per_lane >= 1);
                            // The passes cover Dv, with no pass more than needed, at most 4 vec4 slots each.
                            CHECK(c->dv4 >= 1);
                            CHECK(c->dv4 <= 4);
                            CHECK(c->column_passes * c->columns_per_pass() >= dv);
                            CHECK((c->column_passes - 1) * c->columns_per_pass() < dv);
                            // Texel loads only where every row is 4-aligned: float views where the
                            // device has the format, else views of words.
                            const bool float_views = dtype == DType::f32 ? caps.texel_rgba32f : caps.texel_rgba16f;
                            const bool texel_ok = dk % 4 == 0 && dv % 4 == 0 && (float_views || caps.texel_r32ui);
                            CHECK(c->texel == texel_ok);
                            CHECK(c->texel_words == (texel_ok && !float_views));
                            CHECK(fused_for(caps, p, {.texel_loads = true})->texel == texel_ok);
                            CHECK_FALSE(fused_for(caps, p, {.texel_loads = false, .fused_kernel = FusedKernel::flash})->texel);
                            // K/V staged in shared memory on GPUs, streamed on CPU devices; either
                            // forced. Staged wherever the smallest tiles fit (one vec4 of K per key,
                            // SG keys, one column slot per lane), and the tiles always fit.
                            const std::uint32_t sg = c->subgroup;
                            const auto v_slots = std::min<std::uint32_t>(sg, static_cast<std::uint32_t>((dv + 3) / 4));
                            const bool room = 16 * ((sg + 1) + sg * v_slots) <= caps.max_shared_bytes;
                            CHECK(c->staged == (caps.kind != vk::DeviceKind::cpu && room));
                            if (caps.max_shared_bytes >= 49152 && sg <= 32) CHECK(c->staged);
                            for (const bool staged : {false, true}) {
                                const auto forced = fused_for(caps, p, {.shared_tiles = staged});
                                CHECK(forced->staged == (staged && room));
                                CHECK(forced->shared_bytes() <= caps.max_shared_bytes);
                                CHECK(forced->kd4 >= 1);
                                if (forced->staged) CHECK(forced->v_width4 * 4 >= std::min<std::int64_t>(dv, forced->columns_per_pass()));
                            }
                            CHECK(c->shared_bytes() <= caps.max_shared_bytes);
                        }
}

TEST_CASE("tuning: the staged fused kernel shrinks its tiles to the device's shared memory", "[unit][tuning]") {
    for (const std::uint32_t bytes : {49152u, 32768u, 16384u, 8192u, 4096u, 256u}) {
        vk::DeviceCaps caps = nvidia_like();
        caps.max_shared_bytes = bytes;
        for (const std::int64_t d : {8, 64, 128, 256, 512}) {
            const auto c = fused_for(caps, problem(1, 8, 8, 128, 1000, d, d), {.fused_kernel = FusedKernel::flash});
            INFO(bytes << " bytes, D=" << d << ": " << c->describe());
            CHECK(c->shared_bytes() <= bytes);
            if (bytes >= 32768) CHECK(c->staged);  // room for a tile at every head size
            if (bytes == 256) CHECK_FALSE(c->staged);  // no room for any: streamed instead
        }
    }
}

TEST_CASE("tuning: choose_fused refuses with a reason where it cannot run", "[unit][tuning]") {
    for (const vk::DeviceCaps& device : all_devices()) {
        INFO(device.name);
        const Problem ok = problem(1, 8, 8, 128, 128, 64, 64);
        auto refused = [](const vk::DeviceCaps& caps, const Problem& p, const VariantOverrides& overrides = {}) {
            std::string why;
            const bool none = !fused_for(caps, p, overrides, &why);
            INFO(why);
            CHECK(none);
            CHECK_FALSE(why.empty());
            CHECK_FALSE(fused_for(caps, p, overrides));  // no reason asked for
        };
        vk::DeviceCaps no_arithmetic = device, no_shuffle = device;
        no_arithmetic.subgroup_arithmetic = false;
        no_shuffle.subgroup_shuffle = false;
        refused(no_arithmetic, ok);
        refused(no_shuffle, ok);
        refused(device, ok, {.subgroup_ops = false});
        refused(device, problem(1, 8, 8, 128, 128, 513, 64));
        refused(device, problem(1, 8, 8, 128, 128, 64, 513));
        refused(device, problem(1, 8, 8, 128, 128, 1024, 1024));
        vk::DeviceCaps odd = device;  // no power of two: the layout cannot be built
        odd.subgroup_size_control = false;
        odd.subgroup_size = 24;
        refused(odd, ok);
    }
}

TEST_CASE("tuning: a subgroup takes no more rows than a unit has (GQA decode)", "[unit][tuning]") {
    // group·Nq rows per (batch, K/V head): R is the next power of two, never above the default.
    struct Case {
        std::int64_t Hq, Hkv, Nq, D;
        std::uint32_t rows;
    };
    const Case cases[] = {{32, 8, 1, 128, 4}, {8, 8, 1, 64, 1}, {8, 8, 3, 64, 4}, {12, 4, 1, 64, 4},
                          {32, 4, 1, 128, 8}, {8, 8, 1024, 128, 8}, {8, 8, 1024, 64, 8}, {8, 2, 2, 512, 8}};
    for (const Case& k : cases) {
        const auto c = fused_for(lavapipe_like(), problem(1, k.Hq, k.Hkv, k.Nq, 4096, k.D, k.D));
        REQUIRE(c);
        INFO("Hq=" << k.Hq << " Hkv=" << k.Hkv << " Nq=" << k.Nq << " D=" << k.D << ": " << c->describe());
        CHECK(c->rows == k.rows);
    }
}

TEST_CASE("tuning: the backward's rows, slots, passes and loads", "[unit][tuning][backward]") {
    const std::array<std::int64_t, 4> aligned{8 * 64 * 64, 64 * 64, 64, 1}, odd{5 * 9 * 9, 9 * 9, 9, 1};
    auto choose = [&](const Problem& p, const std::array<std::int64_t, 4>& strides, VariantOverrides o = {}) {
        std::string why;
        const auto c = choose_backward(lavapipe_like(), p, strides, strides, strides, strides, o, &why);
        INFO(why);
        REQUIRE(c);
        return *c;
    };
    const BackwardConfig d64 = choose(problem(1, 8, 8, 1024, 1024, 64, 64), aligned);
    CHECK(d64.q_rows == 8);
    CHECK(d64.kv_keys == 8);
    CHECK(d64.slots == 2);
    CHECK(d64.column_passes == 1);
    CHECK(d64.texel);
    CHECK_FALSE(d64.texel_words);
    const BackwardConfig wide = choose(problem(1, 8, 8, 64, 64, 160, 136), aligned);
    CHECK(wide.slots == 4);
    CHECK(wide.column_passes == 2);
    CHECK(wide.columns_per_pass() == 128);
    const BackwardConfig short_keys = choose(problem(1, 4, 4, 1, 3, 64, 64), aligned);
    CHECK(short_keys.q_rows == 1);
    CHECK(short_keys.kv_keys == 4);
    CHECK_FALSE(choose(problem(1, 8, 8, 9, 9, 9, 9), odd).texel);  // rows not on 4 elements: words
    CHECK_FALSE(choose(problem(1, 8, 8, 64, 64, 64, 64), aligned, {.texel_loads = false}).texel);
    Problem bf16 = problem(1, 8, 8, 64, 64, 64, 64);
    bf16.dtype = bf16.k_dtype = bf16.v_dtype = DType::bf16;
    const BackwardConfig words = choose(bf16, aligned);
    CHECK(words.texel);
    CHECK(words.texel_words);  // no float view of bf16: its words through R32_UINT views
    vk::DeviceCaps none = lavapipe_like();
    none.subgroup_shuffle = false;
    std::string why;
    CHECK_FALSE(choose_backward(none, bf16, aligned, aligned, aligned, aligned, {}, &why));
    CHECK_THAT(why, Catch::Contains("shuffle"));
}

TEST_CASE("tuning: the fused backward fits the loop budget; three stages take the rest", "[unit][tuning][backward]") {
    const std::array<std::int64_t, 4> aligned{8 * 64 * 64, 64 * 64, 64, 1}, odd{5 * 9 * 9, 9 * 9, 9, 1};
    vk::DeviceCaps caps = lavapipe_like();
    caps.max_loop_iterations = 65535;  // lavapipe's loop budget
    std::string why;
    const Problem small = problem(1, 8, 8, 1024, 1024, 64, 64), long_keys = problem(1, 1, 1, 64, 200000, 64, 64);
    CHECK(backward_fused_misfit(caps, *choose_backward(caps, small, aligned, aligned, aligned, aligned, {}, &why), small)
              .empty());
    CHECK_THAT(backward_fused_misfit(caps, *choose_backward(caps, long_keys, aligned, aligned, aligned, aligned, {}, &why),
                                     long_keys),
               Catch::StartsWith("k: 200000 keys"));
    vk::DeviceCaps unlimited = caps;
    unlimited.max_loop_iterations = 0;  // GPUs
    CHECK(backward_fused_misfit(unlimited, *choose_backward(unlimited, long_keys, aligned, aligned, aligned, aligned, {}, &why),
                                long_keys)
              .empty());
    CHECK(unfused_backward_inner_limit(caps) > 200000);
    CHECK(unfused_backward_inner_limit(unlimited) == 0);

    // Three stages: texels where q, k, v and dO rows allow them; the transposed-A products never
    // stage shared tiles and take rows in fours.
    const UnfusedBackwardConfig u = choose_unfused_backward(caps, small, aligned, aligned, aligned, aligned, {});
    CHECK(u.texel);
    CHECK(u.scores.texel);
    CHECK(u.dkv.tm % 4 == 0);
    CHECK_FALSE(u.dkv.shared_tiles);
    CHECK_FALSE(choose_unfused_backward(caps, problem(1, 8, 8, 9, 9, 9, 9), odd, odd, odd, odd, {}).texel);
    CHECK_FALSE(choose_unfused_backward(caps, small, aligned, aligned, aligned, aligned, {.texel_loads = false}).dq.texel);
    vk::DeviceCaps gpu = caps;
    gpu.kind = vk::DeviceKind::discrete;
    const UnfusedBackwardConfig g = choose_unfused_backward(gpu, small, aligned, aligned, aligned, aligned, {});
    CHECK(g.scores.tile);  // bmm_tile.comp reads every form, Aᵀ·B included, through its slices
    CHECK(g.dkv.tile);
    CHECK_FALSE(g.texel);  // and words only
    const UnfusedBackwardConfig gb = choose_unfused_backward(gpu, small, aligned, aligned, aligned, aligned,
                                                             {.gemm_kernel = GemmKernel::blocks});
    CHECK(gb.scores.shared_tiles);
    CHECK_FALSE(gb.dkv.shared_tiles);
    CHECK(gb.dkv.tm == 4);
    Problem bf16 = small;
    bf16.dtype = bf16.k_dtype = bf16.v_dtype = DType::bf16;
    CHECK_FALSE(choose_unfused_backward(caps, bf16, aligned, aligned, aligned, aligned, {}).texel);  // no float view
}

TEST_CASE("tuning: choose_splits splits the keys only when the rows cannot fill the device", "[unit][tuning]") {
    struct Point {
        std::int64_t B, Hq, Hkv, Nq, Nkv;
    };
    const Point decode[] = {{1, 32, 8, 1, 4096}, {1, 8, 1, 1, 6464}, {1, 32, 8, 1, 32768}, {2, 16, 4, 1, 100000}};
    const Point prefill[] = {{4, 32, 32, 4096, 4096}, {8, 32, 8, 2048, 6464}};
    const Point short_keys[] = {{1, 8, 8, 1, 1}, {1, 32, 8, 1, 63}, {1, 8, 1, 1, 200}};
    const unsigned threads[] = {1, 2, 16, 64};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const std::int64_t d : {64, 128, 512})
            for (const auto& group : {std::span<const Point>(decode), std::span<const Point>(prefill),
                                      std::span<const Point>(short_keys)})
                for (const Point& s : group)
                    for (const unsigned t : threads) {
                        const Problem p = problem(s.B, s.Hq, s.Hkv, s.Nq, s.Nkv, d, d);
                        const auto c = fused_for(caps, p);
                        REQUIRE(c);
                        const std::uint32_t splits = choose_splits(caps, p, *c, t);
                        const std::int64_t key_blocks = (s.Nkv + c->key_block() - 1) / c->key_block();
                        INFO(caps.name << " B=" << s.B << " Hq=" << s.Hq << " Hkv=" << s.Hkv << " Nq=" << s.Nq
                                       << " Nkv=" << s.Nkv << " D=" << d << " threads=" << t << ": " << c->describe()
                                       << " splits=" << splits << " of " << key_blocks << " key blocks");
                        CHECK(splits >= 1);
                        CHECK(splits <= key_blocks);
                        // Keys are dealt in whole blocks, ceil(key_blocks / splits) to a split: none is left empty.
                        const std::int64_t per_split = (key_blocks + splits - 1) / splits;
                        CHECK((splits - 1) * per_split < key_blocks);
                        // Each split keeps at least 256 keys, whatever the key block.
                        if (splits > 1) CHECK(key_blocks / splits * c->key_block() >= 256);
                        if (group.data() == prefill) CHECK(splits == 1);
                        if (group.data() == short_keys) CHECK(splits == 1);
                        // Decoding fills a GPU, or a CPU with 2 threads or more, only by splitting the keys.
                        if (group.data() == decode && (caps.kind != vk::DeviceKind::cpu || t >= 2)) CHECK(splits > 1);
                    }
}

TEST_CASE("tuning: a GPU that tells its compute units gets splits for 8 workgroups on each", "[unit][tuning]") {
    // 132 units (an H200's SMs): a decode over 32,768 keys was 8 K/V heads × 31 splits, 248 workgroups.
    vk::DeviceCaps counted = with_size_control(gpu("counted", vk::DeviceKind::discrete, 32, 49152), 32, 32);
    const vk::DeviceCaps uncounted = counted;
    counted.compute_units = 132;
    for (const std::int64_t nkv : {4096, 32768, 131072}) {
        const Problem p = problem(1, 32, 8, 1, nkv, 128, 128);
        const FusedConfig c = *fused_for(counted, p);
        const std::int64_t blocks = 8 * ((4 + c.rows_per_workgroup() - 1) / c.rows_per_workgroup());
        const std::int64_t key_blocks = (nkv + c.key_block() - 1) / c.key_block();
        const std::int64_t most = key_blocks / ((256 + c.key_block() - 1) / c.key_block());  // 256 keys a split
        const std::uint32_t with_units = choose_splits(counted, p, c, 1), without = choose_splits(uncounted, p, c, 1);
        INFO("Nkv=" << nkv << " " << c.describe() << ": " << with_units << " splits with the units, " << without
                    << " without; " << blocks << " row blocks, at most " << most << " splits of 256 keys");
        CHECK(with_units >= without);
        // 8 workgroups per unit, or as many splits as keep 256 keys each (dealing whole blocks to the
        // splits may leave a few unused at the end).
        CHECK(blocks * with_units >= std::min<std::int64_t>(8 * 132, blocks * most) * 3 / 4);
        CHECK(key_blocks / with_units * c.key_block() >= 256);
    }
}

TEST_CASE("tuning: more host threads never mean fewer splits on a CPU device", "[unit][tuning]") {
    const vk::DeviceCaps cpu = lavapipe_like();
    for (const std::int64_t nkv : {1, 300, 4096, 6464, 131072}) {
        const Problem p = problem(1, 32, 8, 1, nkv, 128, 128);
        const FusedConfig c = *fused_for(cpu, p);
        std::uint32_t previous = 1;
        for (unsigned t = 1; t <= 256; ++t) {
            const std::uint32_t splits = choose_splits(cpu, p, c, t);
            INFO("Nkv=" << nkv << " threads=" << t);
            CHECK(splits >= previous);
            previous = splits;
        }
    }
}

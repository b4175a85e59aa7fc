// The GPU decode kernel's tuning (attention/decode.hpp): its layout on every made-up device and
// head size, when it is chosen, its loop budget and its load widths.
#include "support/catch.hpp"

#include <bit>
#include <string>

#include "attention/decode.hpp"
#include "attention/tuning.hpp"
#include "fake_devices.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

TEST_CASE("decode tuning: GPUs choose the decode kernel for a step's few rows, CPU devices only when forced",
          "[unit][tuning][decode]") {
    for (const vk::DeviceCaps& caps : all_devices())
        for (const auto& [hq, hkv, nq] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{32, 8, 1}, {8, 1, 1},
                                           {8, 8, 1}, {32, 8, 2}, {32, 8, 3}, {8, 8, 4096}}) {
            const Problem p = problem(1, hq, hkv, nq, 32768, 128, 128, DType::f16);
            INFO(caps.name << " Hq=" << hq << " Hkv=" << hkv << " Nq=" << nq);
            const bool gpu = caps.kind != vk::DeviceKind::cpu, few_rows = (hq / hkv) * nq <= 8;
            CHECK(fused_for(caps, p)->decode.has_value() == (gpu && few_rows));
            CHECK(fused_for(caps, p, {.fused_kernel = FusedKernel::decode})->decode);
            CHECK_FALSE(fused_for(caps, p, {.fused_kernel = FusedKernel::flash})->decode);
            // Forcing flash.comp's staging or texel loads asks for flash.comp.
            CHECK_FALSE(fused_for(caps, p, {.shared_tiles = true})->decode);
            CHECK_FALSE(fused_for(caps, p, {.texel_loads = true})->decode);
        }
}

TEST_CASE("decode tuning: a layout every device runs, for every head size and type", "[unit][tuning][decode]") {
    const std::int64_t dims[] = {1, 8, 36, 40, 64, 80, 128, 256, 512};
    const DType types[] = {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::q8_0, DType::q4_0};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const std::int64_t group : {1, 4, 7, 8, 16})
            for (const std::int64_t dk : dims)
                for (const std::int64_t dv : {std::int64_t{8}, dk, std::int64_t{512}})
                    for (const DType kv : types) {
                        if (is_block_type(kv) && (dk % 32 != 0 || dv % 32 != 0)) continue;
                        Problem p = problem(2, 8 * group, 8, 1, 1000, dk, dv);
                        p.k_dtype = p.v_dtype = kv;
                        std::string why;
                        const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::decode}, &why);
                        INFO(caps.name << " group " << group << " Dk " << dk << " Dv " << dv << " " << to_string(kv) << ": " << why);
                        REQUIRE(c);
                        REQUIRE(c->decode);
                        const DecodeLayout& d = *c->decode;
                        INFO(c->describe());
                        // Lanes per key: a power of two within the subgroup; the chunks cover the rows,
                        // none of them wholly past both.
                        CHECK(std::has_single_bit(d.lanes_per_key));
                        CHECK(d.lanes_per_key <= c->subgroup);
                        const std::int64_t ck = decode_chunk_elements(kv);
                        CHECK(d.k_chunks * d.lanes_per_key * ck >= dk);
                        CHECK((d.k_chunks - 1) * d.lanes_per_key * ck < dk);
                        CHECK(d.v_chunks * d.lanes_per_key * ck >= dv);
                        CHECK((d.v_chunks - 1) * d.lanes_per_key * ck < dv);
                        // Every subgroup holds the unit's rows (up to 8); one column pass.
                        CHECK(c->rows == std::min<std::int64_t>(8, std::bit_ceil(static_cast<std::uint64_t>(group))));
                        CHECK(c->rows_per_workgroup() == c->rows);
                        CHECK(c->column_passes == 1);
                        CHECK_FALSE(c->texel);
                        CHECK(c->subgroups * c->subgroup <= caps.max_workgroup_invocations);
                        CHECK(decode_shared_bytes(d, c->subgroups, kv) <= caps.max_shared_bytes);
                        CHECK(c->key_block() == c->subgroups * (c->subgroup / d.lanes_per_key) * d.keys_per_lane);
                        // Q per lane: rows × elements, at most 64 floats where the lanes per key the
                        // rule wants fit the subgroup (8 elements a lane with more than 4 rows).
                        const std::int64_t elements = d.k_chunks * ck;
                        if (dk >= 128 && ck <= 8 && std::max(dk, dv) <= 8 * std::int64_t{c->subgroup})
                            CHECK(c->rows * elements <= 64);
                    }
}

TEST_CASE("decode tuning: the H200's step", "[unit][tuning][decode]") {
    // B 1, Hq 32, Hkv 8, D 128, f16: 4 rows per workgroup, 8 lanes of 16 elements per key (two 16-byte
    // K loads and two of V per key), 4 keys side by side in a subgroup, 2 per slot: 32 keys a step.
    vk::DeviceCaps h200 = nvidia_like();
    h200.compute_units = 132;
    Problem p = problem(1, 32, 8, 1, 32768, 128, 128, DType::f16);
    p.k_dtype = p.v_dtype = DType::f16;
    const FusedConfig c = *fused_for(h200, p);
    REQUIRE(c.decode);
    CHECK(c.describe() == "decode[words sg32!x4 rows4 keys32 lanes/key8 keys/lane2 k2 v2]");
    // 8 workgroups per SM wanted, 256 keys per split at least: 128 splits × 8 heads = 1,024 workgroups.
    CHECK(choose_splits(h200, p, c, 1) == 128);
}

TEST_CASE("decode tuning: the loop budget counts every step's loops", "[unit][tuning][decode]") {
    const vk::DeviceCaps cpu = lavapipe_like();
    vk::DeviceCaps budget = cpu;
    budget.max_loop_iterations = 65535;
    for (const std::int64_t d : {8, 64, 128, 256}) {
        const Problem p = problem(1, 32, 8, 1, 100000, d, d);
        const FusedConfig c = *fused_for(cpu, p, {.fused_kernel = FusedKernel::decode});
        const std::int64_t keys = fused_keys_per_dispatch(budget, c, p);
        const std::int64_t steps = keys / c.key_block();
        INFO("D " << d << ": " << keys << " keys, " << steps << " steps of " << decode_loops_per_step(*c.decode, c.rows, p));
        CHECK(keys % c.key_block() == 0);
        CHECK(steps >= 1);
        CHECK(steps * decode_loops_per_step(*c.decode, c.rows, p) + 1000 <= 65535);
        CHECK(fused_keys_per_dispatch(cpu, c, p) == 0);  // no budget: unlimited
    }
}

TEST_CASE("decode tuning: 16-byte loads only where every row starts on 16 bytes", "[unit][tuning][decode]") {
    TensorDesc d;
    d.stride = {8 * 64 * 128, 64 * 128, 128, 1};
    d.origin = {0, 0, 0, 0};
    CHECK(decode_wide_rows(d, DType::f16, 128));
    CHECK(decode_wide_rows(d, DType::f32, 128));
    CHECK(decode_wide_rows(d, DType::fp8_e4m3, 128));
    d.origin[3] = 4;  // a tensor starting 8 bytes into its binding
    CHECK_FALSE(decode_wide_rows(d, DType::f16, 128));
    CHECK(decode_wide_rows(d, DType::f32, 128));
    d.origin[3] = 0;
    d.stride[2] = 36;  // rows of 36 f16: 72 bytes apart
    CHECK_FALSE(decode_wide_rows(d, DType::f16, 36));
    CHECK(decode_wide_rows(d, DType::f32, 36));
    CHECK(decode_wide_rows(d, DType::q8_0, 36 * 32));  // block types load words whatever their alignment
    d.stride[2] = 128;
    CHECK_FALSE(decode_wide_rows(d, DType::f16, 124));  // a partial last chunk
    PagedKv paged{.block_size = 16, .block_units = 16 * 8, .row_units = 8};
    TensorDesc pool;
    pool.stride = {0, 128, 0, 128};
    CHECK(decode_wide_pool(pool, paged, DType::f16, 0));
    CHECK_FALSE(decode_wide_pool(pool, paged, DType::f16, 8));  // a pool 8 bytes into its buffer
    pool.stride[1] = pool.stride[3] = 36;
    CHECK_FALSE(decode_wide_pool(pool, paged, DType::f16, 0));
}

TEST_CASE("decode tuning: forced lanes per key are honoured up to the subgroup, refused by name past it",
          "[unit][tuning][decode]") {
    Problem p = problem(1, 32, 8, 1, 32768, 128, 96, DType::f16);
    p.k_dtype = DType::q8_0;
    p.v_dtype = DType::f16;
    for (const vk::DeviceCaps& caps : all_devices()) {
        const FusedConfig chosen = *fused_for(caps, p, {.fused_kernel = FusedKernel::decode});
        for (const std::uint32_t lpk : {1u, 2u, 3u, 4u, 16u, 32u, 64u, 256u}) {
            INFO(caps.name << " sg " << chosen.subgroup << " lanes/key " << lpk);
            const VariantOverrides forced{.fused_kernel = FusedKernel::decode, .decode_lanes_per_key = lpk};
            if (!std::has_single_bit(lpk) || lpk > chosen.subgroup) {
                try {
                    fused_for(caps, p, forced);
                    FAIL("taken");
                } catch (const InvalidArgument& e) {
                    CHECK(e.argument() == "variant.decode_lanes_per_key");
                    CHECK_THAT(e.what(), Catch::Contains("up to the subgroup's " + std::to_string(chosen.subgroup) + " lanes"));
                }
                continue;
            }
            const FusedConfig c = *fused_for(caps, p, forced);
            REQUIRE(c.decode);
            CHECK(c.decode->lanes_per_key == lpk);
            // The chunks still cover both rows.
            CHECK(std::int64_t{c.decode->k_chunks} * lpk * decode_chunk_elements(p.k_dtype) >= p.Dk);
            CHECK(std::int64_t{c.decode->v_chunks} * lpk * decode_chunk_elements(p.v_dtype) >= p.Dv);
            CHECK(decode_shared_bytes(*c.decode, c.subgroups, p.v_dtype) <= caps.max_shared_bytes);
        }
    }
}

// The paged KV cache: appends land through the block table exactly (checked against a host model
// by gathering the pools through the table), blocks are taken and freed as the lengths say, and bad
// arguments are refused before anything is recorded. Attention over it: test_paged_decode.cpp.
#include "support/catch.hpp"

#include <optional>
#include <random>

#include "support/cache_support.hpp"
#include "support/paged_cache_support.hpp"
#include "support/device_tuning.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using test::download_floats;
using test::download_i32;
using test::host_cache;
using test::rows_on_device;
using test::shuffled_table;

namespace {

// Rows [0, length) of every sequence and head, as floats in (b, h, n, d) order: from the pools
// through the device's block table, and from the host model.
std::vector<float> gathered(const PagedKvCache& cache, bool values, const std::vector<std::int32_t>& lengths) {
    const PagedKvCacheOptions& o = cache.options();
    const auto& pools = values ? cache.v_pools() : cache.k_pools();
    const std::int64_t D = values ? o.dim_v : o.dim, per_pool = pools[0].shape()[0];
    std::vector<std::vector<float>> data;
    for (const DeviceTensor& pool : pools) data.push_back(download_floats(pool));
    const std::vector<std::int32_t> table = download_i32(cache.block_table());
    std::vector<float> out;
    for (std::int64_t b = 0; b < o.batch; ++b)
        for (std::int64_t h = 0; h < o.kv_heads; ++h)
            for (std::int64_t n = 0; n < lengths[static_cast<std::size_t>(b)]; ++n) {
                const std::int64_t block = table[static_cast<std::size_t>(b * o.max_blocks_per_seq + n / o.block_size)];
                REQUIRE(block >= 0);
                const auto& pool = data[static_cast<std::size_t>(block / per_pool)];
                const std::int64_t row = ((block % per_pool) * o.block_size + n % o.block_size) * o.kv_heads + h;
                for (std::int64_t d = 0; d < D; ++d) out.push_back(pool[static_cast<std::size_t>(row * D + d)]);
            }
    return out;
}

std::vector<float> host_rows(const HostTensor& t, const std::vector<std::int32_t>& lengths) {
    std::vector<float> out;
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h)
            for (std::int64_t n = 0; n < lengths[static_cast<std::size_t>(b)]; ++n)
                for (std::int64_t d = 0; d < t.shape[3]; ++d) out.push_back(t.at(b, h, n, d));
    return out;
}

void check_cache(const PagedKvCache& cache, const HostKvCache& want) {
    CHECK(download_i32(cache.lengths()) == want.lengths);
    CHECK(cache.recorded_lengths() == want.lengths);
    CHECK(download_i32(cache.block_table()) == cache.recorded_block_table());
    CHECK(gathered(cache, false, want.lengths) == host_rows(want.k, want.lengths));  // exact: a copy
    CHECK(gathered(cache, true, want.lengths) == host_rows(want.v, want.lengths));
    // Exactly the blocks the table names are taken.
    std::vector<std::int32_t> named;
    for (const std::int32_t block : cache.recorded_block_table())
        if (block >= 0) named.push_back(block);
    CHECK(cache.free_blocks() == cache.options().num_blocks - static_cast<std::int64_t>(named.size()));
}

void append_and_check(Context& ctx, DType in, DType stored, std::int64_t block_size, bool given_table,
                      std::int64_t dim = 24, std::int64_t dim_v = 20, std::optional<DType> stored_v = {},
                      std::vector<float> k_scale = {}, std::vector<float> v_scale = {}) {
    std::mt19937 rng(static_cast<unsigned>(in) * 5 + static_cast<unsigned>(stored) * 3 + static_cast<unsigned>(block_size));
    const std::int64_t max_blocks = (37 + block_size - 1) / block_size;
    const PagedKvCacheOptions o{.batch = 3, .kv_heads = 2, .num_blocks = 3 * max_blocks + 2, .block_size = block_size,
                                .max_blocks_per_seq = max_blocks, .dim = dim, .dim_v = dim_v, .dtype = stored,
                                .dtype_v = stored_v, .k_scale = k_scale, .v_scale = v_scale};
    PagedKvCache cache(ctx, o);
    HostKvCache want = host_cache(cache);
    CHECK(cache.free_blocks() == o.num_blocks);
    CHECK(download_i32(cache.block_table()) == std::vector<std::int32_t>(static_cast<std::size_t>(3 * max_blocks), -1));
    if (given_table) {  // every entry given, shuffled: appends take no block of their own
        Batch batch(ctx);
        cache.set_block_table(batch, shuffled_table(rng, o, {max_blocks, max_blocks, max_blocks}));
        batch.submit().wait();
    }
    const std::vector<std::vector<std::int32_t>> rounds{{5, 0, 13}, {}, {}, {}, {4, 1, 0}};
    const std::vector<std::int64_t> rows{13, 1, 1, 1, 4};
    for (std::size_t r = 0; r < rounds.size(); ++r) {
        HostTensor k_host, v_host;
        const DeviceTensor k_new = rows_on_device(ctx, rng, in, o.batch, o.kv_heads, rows[r], o.dim, k_host);
        const DeviceTensor v_new = rows_on_device(ctx, rng, in, o.batch, o.kv_heads, rows[r], o.dim_v, v_host);
        Batch batch(ctx);
        cache.append(batch, k_new, v_new, rounds[r]);
        batch.submit().wait();
        want.append(k_host, v_host, rounds[r]);
        INFO("round " << r);
        check_cache(cache, want);
    }
    // A reset frees the blocks past each new length; the next append takes blocks again.
    Batch batch(ctx);
    const std::vector<std::int32_t> lengths{2, 0, 12};
    cache.reset(batch, lengths);
    HostTensor k_host, v_host;
    const DeviceTensor k_new = rows_on_device(ctx, rng, in, o.batch, o.kv_heads, 1, o.dim, k_host);
    const DeviceTensor v_new = rows_on_device(ctx, rng, in, o.batch, o.kv_heads, 1, o.dim_v, v_host);
    cache.append(batch, k_new, v_new);
    batch.submit().wait();
    want.lengths = lengths;
    want.append(k_host, v_host);
    check_cache(cache, want);
    const std::vector<std::int32_t> table = cache.recorded_block_table();
    for (std::size_t b = 0; b < 3; ++b)  // entries past the new lengths (3, 1, 13 keys) are free again
        for (std::int64_t e = (want.lengths[b] + block_size - 1) / block_size; e < max_blocks; ++e)
            CHECK(table[b * static_cast<std::size_t>(max_blocks) + static_cast<std::size_t>(e)] == -1);
}

}  // namespace

TEST_CASE("paged kv cache: appends land through the block table, exactly", "[gpu][cache][paged]") {
    Context& ctx = test::gpu_context();
    const DType in = GENERATE(DType::f32, DType::f16);
    const DType stored = GENERATE(DType::f32, DType::f16);
    const std::int64_t block_size = GENERATE(1, 5, 16);
    const bool given_table = GENERATE(false, true);
    INFO("new rows " << to_string(in) << ", cache " << to_string(stored) << ", block size " << block_size
                     << (given_table ? ", shuffled table given" : ", blocks taken by the appends"));
    append_and_check(ctx, in, stored, block_size, given_table);
    const std::string messages = test::take_validation_messages(ctx);
    INFO(messages);
    CHECK(messages.empty());
}

TEST_CASE("paged kv cache: appends quantize to bf16 and ggml's blocks through the block table", "[gpu][cache][paged][storage_types]") {
    Context& ctx = test::gpu_context();
    const DType in = GENERATE(DType::f32, DType::bf16);
    const DType stored = GENERATE(DType::bf16, DType::q8_0, DType::q4_0, DType::q5_1, DType::iq4_nl);
    const std::int64_t block_size = GENERATE(5, 16);
    INFO("new rows " << to_string(in) << ", cache " << to_string(stored) << ", block size " << block_size);
    append_and_check(ctx, in, stored, block_size, block_size == 5, 64, 32);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("paged kv cache: fp8 pools with their scales, K's and V's of different types", "[gpu][cache][paged][storage_types]") {
    Context& ctx = test::gpu_context();
    append_and_check(ctx, DType::f16, DType::fp8_e5m2, 5, true, 64, 32, DType::q4_0, {4.0f});
    append_and_check(ctx, DType::f32, DType::bf16, 16, false, 24, 20, DType::fp8_e4m3, {}, {0.5f, 0.25f});
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("paged kv cache: bad options, appends, tables and plans name the argument and record nothing",
          "[gpu][cache][paged]") {
    Context& ctx = test::gpu_context();
    CHECK_THROWS_WITH(PagedKvCache(ctx, {.num_blocks = 0, .dim = 8}), Catch::Contains("num_blocks"));
    CHECK_THROWS_WITH(PagedKvCache(ctx, {.num_blocks = 4, .block_size = 0, .dim = 8}), Catch::Contains("block_size"));
    CHECK_THROWS_WITH(PagedKvCache(ctx, {.num_blocks = 4, .dim = 8, .dtype = DType::u8}), Catch::Contains("dtype"));
    CHECK_THROWS_WITH(PagedKvCache(ctx, {.num_blocks = 4, .block_size = 1 << 20, .max_blocks_per_seq = 1 << 12, .dim = 8}),
                      Catch::Contains("max_blocks_per_seq"));

    const PagedKvCacheOptions o{.batch = 2, .kv_heads = 2, .num_blocks = 3, .block_size = 4, .max_blocks_per_seq = 2, .dim = 8};
    PagedKvCache cache(ctx, o);
    std::mt19937 rng(5);
    HostTensor host;
    const DeviceTensor k4 = rows_on_device(ctx, rng, DType::f32, 2, 2, 4, 8, host);
    const DeviceTensor k3 = rows_on_device(ctx, rng, DType::f32, 2, 2, 3, 8, host);
    const DeviceTensor wide = rows_on_device(ctx, rng, DType::f32, 2, 2, 4, 9, host);
    const DeviceTensor k5 = rows_on_device(ctx, rng, DType::f32, 2, 2, 5, 8, host);
    Batch batch(ctx);
    CHECK_THROWS_WITH(cache.append(batch, wide, k4), Catch::Contains("k_new") && Catch::Contains("[2, 2, T >= 1, 8]"));
    cache.append(batch, k4, k4);  // a block each: 0 and 1
    CHECK(cache.recorded_block_table() == std::vector<std::int32_t>{0, -1, 1, -1});
    CHECK_THROWS_WITH(cache.append(batch, k3, k3), Catch::Contains("needs 2 more blocks but 1"));
    CHECK_THROWS_WITH(cache.append(batch, k4, k4, std::vector<std::int32_t>{0, 5}), Catch::Contains("counts[1] = 5"));
    CHECK_THROWS_WITH(cache.append(batch, k5, k5, std::vector<std::int32_t>{0, 5}),
                      Catch::Contains("sequence 1 holds 4 of its 8 keys"));
    CHECK_THROWS_WITH(cache.set_block_table(batch, std::vector<std::int32_t>{0, 1, -1}),
                      Catch::Contains("table") && Catch::Contains("2 × 2"));
    CHECK_THROWS_WITH(cache.set_block_table(batch, std::vector<std::int32_t>{0, 3, 1, -1}), Catch::Contains("table[1] = 3"));
    CHECK_THROWS_WITH(cache.set_block_table(batch, std::vector<std::int32_t>{-1, 0, 1, -1}),
                      Catch::Contains("sequence 0 holds 4 keys") && Catch::Contains("entry 0 is -1"));
    CHECK_THROWS_WITH(cache.reset(batch, std::vector<std::int32_t>{9, 0}),
                      Catch::Contains("lengths[0] = 9") && Catch::Contains("[0, 8]"));
    // Block 1 named twice (sequence 0's second entry, sequence 1's first): sequence 0's next row
    // would land in it.
    cache.set_block_table(batch, std::vector<std::int32_t>{0, 1, 1, -1});
    CHECK(cache.free_blocks() == 1);
    CHECK_THROWS_WITH(cache.append(batch, k3, k3, std::vector<std::int32_t>{1, 0}),
                      Catch::Contains("block 1") && Catch::Contains("read-only"));
    Context other(test::test_context_options());
    Batch foreign(other);
    CHECK_THROWS_WITH(cache.append(foreign, k4, k4), Catch::Contains("another Context"));
    batch.submit().wait();
    CHECK(download_i32(cache.lengths()) == std::vector<std::int32_t>{4, 4});  // only what passed
    CHECK(download_i32(cache.block_table()) == std::vector<std::int32_t>{0, 1, 1, -1});
    CHECK(cache.recorded_lengths() == std::vector<std::int32_t>{4, 4});

    // Plans over a paged K/V: the fused kernels only, with lengths, without k and v.
    const DeviceTensor q = DeviceTensor::empty(ctx, DType::f32, {2, 4, 1, 8});
    const DeviceTensor o_dev = DeviceTensor::empty(ctx, DType::f32, {2, 4, 1, 8});
    CHECK_THROWS_WITH(AttentionPlan(ctx, cache.inputs(q), {o_dev}, {.impl = Impl::unfused}), Catch::Contains("impl"));
    const DeviceTensor weights = DeviceTensor::empty(ctx, DType::f32, {2, 4, 1, 8});
    CHECK_THROWS_WITH(AttentionPlan(ctx, cache.inputs(q), {.o = o_dev, .weights = weights}), Catch::Contains("weights"));
    CHECK_THROWS_WITH(AttentionPlan(ctx, cache.inputs(q), {.o = o_dev, .logits = weights}), Catch::Contains("logits"));
    DeviceAttentionInputs no_lengths = cache.inputs(q);
    no_lengths.kv_lengths = {};
    CHECK_THROWS_WITH(AttentionPlan(ctx, no_lengths, {o_dev}), Catch::Contains("kv_lengths"));
    DeviceAttentionInputs both = cache.inputs(q);
    both.k = k4;
    CHECK_THROWS_WITH(AttentionPlan(ctx, both, {o_dev}), Catch::StartsWith("k:"));
    const AttentionPlan plan(ctx, cache.inputs(q), {o_dev});
    PagedKvCache bigger(ctx, {.batch = 2, .kv_heads = 2, .num_blocks = 5, .block_size = 4, .max_blocks_per_seq = 2, .dim = 8});
    Batch run(ctx);
    CHECK_THROWS_WITH(plan.run(run, bigger.inputs(q), {o_dev}), Catch::Contains("paged") && Catch::Contains("5 blocks"));
    KvCache contiguous(ctx, {.batch = 2, .kv_heads = 2, .capacity = 8, .dim = 8});
    CHECK_THROWS_WITH(plan.run(run, contiguous.inputs(q), {o_dev}), Catch::Contains("paged"));
    CHECK(test::take_validation_messages(ctx).empty());
}

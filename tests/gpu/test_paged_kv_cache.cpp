// The paged KV cache: appends land through the block table exactly (checked against a host model
// by gathering the pools through the table), blocks are taken and freed as the lengths say, bad
// arguments are refused before anything is recorded, and attention over random block tables
// (shuffled, non-contiguous blocks; lengths ending mid-block; GQA; f16; pools over several
// bindings) matches the reference and gives the contiguous cache's outputs bit for bit.
#include "support/catch.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>

#include "support/cache_support.hpp"
#include "support/device_tuning.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using test::download_floats;
using test::download_i32;
using test::floats_of;
using test::rows_on_device;

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

// A table naming `entries[b]` distinct random blocks for sequence b (out of num_blocks), -1 after.
std::vector<std::int32_t> shuffled_table(std::mt19937& rng, const PagedKvCacheOptions& o,
                                         const std::vector<std::int64_t>& entries) {
    std::vector<std::int32_t> blocks(static_cast<std::size_t>(o.num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<std::int32_t> table(static_cast<std::size_t>(o.batch * o.max_blocks_per_seq), -1);
    std::size_t next = 0;
    for (std::size_t b = 0; b < entries.size(); ++b)
        for (std::int64_t e = 0; e < entries[b]; ++e)
            table[b * static_cast<std::size_t>(o.max_blocks_per_seq) + static_cast<std::size_t>(e)] = blocks.at(next++);
    return table;
}

HostKvCache host_cache(const PagedKvCache& cache) {
    const PagedKvCacheOptions& o = cache.options();
    return HostKvCache(o.dtype, o.batch, o.kv_heads, cache.capacity(), o.dim, o.dim_v, o.dtype_v, o.k_scale, o.v_scale);
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

namespace {

struct DecodeCase {
    DType dtype = DType::f32;                // q's, o's and the new rows'
    std::optional<DType> k_type, v_type;     // the caches'; unset = dtype
    std::vector<float> k_scale, v_scale;     // fp8 caches' scales
    Impl impl = Impl::automatic;
    VariantOverrides variant;                // the kernels' variant (default: the tuning's)
    std::int64_t batch = 3, heads = 6, kv_heads = 2, block_size = 16, max_blocks = 6, num_blocks = 20, dim = 32, dim_v = 24;
    std::vector<std::int32_t> prompts{23, 1, 61};
    int steps = 4;
    unsigned seed = 1;
};

// The same prompts and steps through a contiguous KvCache and a PagedKvCache over a shuffled block
// table (the blocks each sequence will need, drawn at random from the whole pool): every step's
// paged output matches the reference and, when `identical`, the contiguous output bit for bit.
void decode_twice(Context& ctx, const DecodeCase& c, bool identical) {
    std::mt19937 rng(c.seed);
    const PagedKvCacheOptions po{.batch = c.batch, .kv_heads = c.kv_heads, .num_blocks = c.num_blocks,
                                 .block_size = c.block_size, .max_blocks_per_seq = c.max_blocks, .dim = c.dim,
                                 .dim_v = c.dim_v, .dtype = c.k_type.value_or(c.dtype), .dtype_v = c.v_type.value_or(c.dtype),
                                 .k_scale = c.k_scale, .v_scale = c.v_scale};
    PagedKvCache paged(ctx, po);
    KvCache contiguous(ctx, {.batch = c.batch, .kv_heads = c.kv_heads, .capacity = paged.capacity(), .dim = c.dim,
                             .dim_v = c.dim_v, .dtype = po.dtype, .dtype_v = po.dtype_v, .k_scale = c.k_scale,
                             .v_scale = c.v_scale});
    HostKvCache want = host_cache(paged);
    std::vector<std::int64_t> entries;
    for (const std::int32_t p : c.prompts) entries.push_back((p + c.steps + c.block_size - 1) / c.block_size);
    const std::int64_t longest = *std::max_element(c.prompts.begin(), c.prompts.end());
    HostTensor k_host, v_host;
    const DeviceTensor k_new = rows_on_device(ctx, rng, c.dtype, c.batch, c.kv_heads, longest, c.dim, k_host);
    const DeviceTensor v_new = rows_on_device(ctx, rng, c.dtype, c.batch, c.kv_heads, longest, c.dim_v, v_host);
    {
        Batch batch(ctx);
        paged.set_block_table(batch, shuffled_table(rng, po, entries));
        paged.append(batch, k_new, v_new, c.prompts);
        contiguous.append(batch, k_new, v_new, c.prompts);
        batch.submit().wait();
        want.append(k_host, v_host, c.prompts);
    }
    const DeviceTensor q = DeviceTensor::empty(ctx, c.dtype, {c.batch, c.heads, 1, c.dim});
    const DeviceTensor o_paged = DeviceTensor::empty(ctx, c.dtype, {c.batch, c.heads, 1, c.dim_v});
    const DeviceTensor o_contiguous = DeviceTensor::empty(ctx, c.dtype, {c.batch, c.heads, 1, c.dim_v});
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = c.impl, .variant = c.variant,
                                   .splits = c.impl == Impl::split ? 3u : 0u};
    const AttentionPlan plan_paged(ctx, paged.inputs(q), {o_paged}, options);
    const AttentionPlan plan_contiguous(ctx, contiguous.inputs(q), {o_contiguous}, options);
    if (c.variant.row_tiles == 2u) CHECK_THAT(plan_paged.report().variant, Catch::Contains(" rt2 "));
    if (c.variant.kv_apart == true) CHECK_THAT(plan_paged.report().variant, Catch::Contains(" kv-apart "));
    const DeviceTensor k_step = DeviceTensor::empty(ctx, c.dtype, {c.batch, c.kv_heads, 1, c.dim});
    const DeviceTensor v_step = DeviceTensor::empty(ctx, c.dtype, {c.batch, c.kv_heads, 1, c.dim_v});
    for (int step = 0; step < c.steps; ++step) {
        const HostTensor q_host = random_tensor(rng, c.dtype, Layout::bhnd, q.shape());
        k_host = random_tensor(rng, c.dtype, Layout::bhnd, k_step.shape());
        v_host = random_tensor(rng, c.dtype, Layout::bhnd, v_step.shape());
        HostTensor got_paged = nan_tensor(c.dtype, Layout::bhnd, o_paged.shape());
        HostTensor got_contiguous = nan_tensor(c.dtype, Layout::bhnd, o_paged.shape());
        Batch batch(ctx);
        batch.upload(q, q_host.view());
        batch.upload(k_step, k_host.view());
        batch.upload(v_step, v_host.view());
        paged.append(batch, k_step, v_step);
        contiguous.append(batch, k_step, v_step);
        plan_paged.run(batch, paged.inputs(q), {o_paged});
        plan_contiguous.run(batch, contiguous.inputs(q), {o_contiguous});
        batch.download(o_paged, got_paged.mutable_view());
        batch.download(o_contiguous, got_contiguous.mutable_view());
        batch.submit().wait();
        want.append(k_host, v_host);
        const std::string what = "step " + std::to_string(step) + ", " + plan_paged.report().variant;
        test::check_step(q_host, got_paged, want, options, what);
        if (identical) {
            INFO(what << " against the contiguous cache's " << plan_contiguous.report().variant);
            REQUIRE(floats_of(got_paged) == floats_of(got_contiguous));
        }
    }
    CHECK(download_i32(paged.lengths()) == want.lengths);
    CHECK(plan_paged.stats().bindings_built == 1);  // every step replays the same program
    CHECK(plan_paged.report().path != Impl::unfused);
    if (c.impl != Impl::automatic) CHECK(plan_paged.report().path == c.impl);
    if (c.variant.shared_tiles)  // what was asked for ran (FusedConfig::describe())
        CHECK_THAT(plan_paged.report().variant, Catch::Contains(*c.variant.shared_tiles ? " staged" : " streamed"));
    if (c.variant.fused_kernel)  // the kernel asked for ran
        CHECK_THAT(plan_paged.report().variant, Catch::StartsWith(to_string(*c.variant.fused_kernel) + "["));
}

}  // namespace

TEST_CASE("paged kv cache: decoding over shuffled blocks matches the reference and the contiguous cache bit for bit",
          "[gpu][cache][paged]") {
    Context& ctx = test::gpu_context();
    DecodeCase c;
    c.dtype = GENERATE(DType::f32, DType::f16);
    c.impl = GENERATE(Impl::automatic, Impl::fused, Impl::split);
    c.block_size = GENERATE(16, 7, 1);
    c.max_blocks = (70 + c.block_size - 1) / c.block_size;
    c.num_blocks = 3 * c.max_blocks;
    c.seed = 60 + static_cast<unsigned>(c.block_size) + static_cast<unsigned>(c.impl) * 3;
    INFO(to_string(c.dtype) << " " << to_string(c.impl) << ", block size " << c.block_size);
    decode_twice(ctx, c, true);
    const std::string messages = test::take_validation_messages(ctx);
    INFO(messages);
    CHECK(messages.empty());
}

TEST_CASE("paged kv cache: decoding over fp8 pools matches the reference and the contiguous cache bit for bit",
          "[gpu][cache][paged][storage_types]") {
    Context& ctx = test::gpu_context();
    DecodeCase c;
    c.dtype = DType::f16;
    c.k_type = DType::fp8_e5m2;
    c.v_type = DType::fp8_e4m3;
    c.k_scale = {0.5f, 2.0f};
    c.v_scale = {0.0625f};
    c.impl = Impl::split;
    c.block_size = 7;
    c.max_blocks = 11;
    c.num_blocks = 33;
    c.seed = 808;
    decode_twice(ctx, c, true);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("paged kv cache: the decode, tile and coopmat kernels over shuffled blocks and odd block sizes",
          "[gpu][cache][paged][decode][tile][coopmat][kernel_sweep]") {
    // flash_decode.comp, flash_tile.comp and flash_coopmat.comp (with one row tile per subgroup, and
    // with two and K and V in tiles of their own) forced: their lanes look keys' rows up in the block
    // table; the same kernel over the contiguous cache computes the same bits.
    Context& ctx = test::gpu_context();
    DecodeCase c;
    c.dtype = GENERATE(DType::f32, DType::f16, DType::bf16);
    c.block_size = GENERATE(16, 7, 1);
    const int which = GENERATE(0, 1, 2, 3);
    const FusedKernel kernel = which == 0 ? FusedKernel::decode : which == 1 ? FusedKernel::tile : FusedKernel::coopmat;
    if (which == 3) {
        c.variant.row_tiles = 2;
        c.variant.kv_apart = true;
    }
    c.impl = GENERATE(Impl::fused, Impl::split);
    if (kernel == FusedKernel::decode && c.impl == Impl::fused) return;  // the decode kernel runs split runs
    // The cooperative-matrix kernel multiplies f16 or bf16 operands: 16-bit storage is what it
    // multiplies (bf16 where the device runs it: the portable implementation, or units that take
    // bf16). bf16 runs it alone (the other kernels' storage types have their own tests).
    if (kernel == FusedKernel::coopmat && c.dtype == DType::f32) return;
    if (c.dtype == DType::bf16 &&
        (kernel != FusedKernel::coopmat || !test::device_caps().fp16_storage || !test::coopmat_bf16_runs_here()))
        return;
    c.variant.fused_kernel = kernel;
    c.dim = 64;  // 16-byte rows (f16's 8-element chunks)
    c.dim_v = 40;
    c.max_blocks = (70 + c.block_size - 1) / c.block_size;
    c.num_blocks = 3 * c.max_blocks;
    c.seed = 170 + static_cast<unsigned>(c.block_size);
    INFO(to_string(c.dtype) << ", block size " << c.block_size << ", " << to_string(kernel) << (which == 3 ? " rt2 kv-apart " : " ")
                            << to_string(c.impl));
    decode_twice(ctx, c, true);
    CHECK(test::take_validation_messages(ctx).empty());
}

// The pools tests' decode: three sequences (prompts 40, 17, 3) over 14 cache blocks of 8 rows, which a
// test's small bindings spread over several pools.
DecodeCase pooled_case() {
    DecodeCase c;
    c.block_size = 8;
    c.max_blocks = 6;
    c.num_blocks = 14;
    c.prompts = {40, 17, 3};
    return c;
}

TEST_CASE("paged kv cache: pools over several bindings append and attend through the table", "[gpu][cache][paged]") {
    // 20000-byte bindings: a block of K (8 rows · 2 heads · 64 floats) is 4096 bytes, so a pool holds
    // 4 blocks and 14 blocks take 4 pools; the shuffled table spreads every sequence over them.
    ContextOptions options = test::test_context_options();
    options.max_binding_bytes = 20000;
    Context small(options);
    DecodeCase c = pooled_case();
    c.impl = GENERATE(Impl::fused, Impl::split);
    c.dim = 64;
    c.dim_v = 48;
    c.steps = 3;
    c.seed = 91;
    PagedKvCache probe(small, {.batch = 1, .kv_heads = 2, .num_blocks = 14, .block_size = 8, .dim = 64, .dim_v = 48});
    CHECK(probe.k_pools().size() == 4);
    CHECK(probe.k_pools()[3].shape()[0] == 2);
    // The contiguous cache's keys are sliced over bindings; its split run (same splits) is the
    // same computation, its fused run becomes a split run, so only split is compared bit for bit.
    decode_twice(small, c, c.impl == Impl::split);
    const std::string messages = test::take_validation_messages(small);
    INFO(messages);
    CHECK(messages.empty());
}

TEST_CASE("paged kv cache: ggml-block pools over several bindings, walked a block at a time", "[gpu][cache][paged][storage_types]") {
    // 11000-byte bindings: a cache block of q8_0 K (8 rows · 2 heads · 4 ggml blocks of 34 bytes) is
    // 2176 bytes, of q8_0 V (rows of 160: 170 bytes) 2720; K and V pools share one block count, set
    // by the larger, so 14 blocks take 3 pools (q8_0 K) or 4 (q8_0 V). Wide heads load K a block at
    // a time and V in parts of blocks (halves on 8-lane subgroups), through every pool. That walk is
    // the streamed kernel's (flash.comp), so it is forced: GPUs would otherwise stage K and V.
    ContextOptions options = test::test_context_options();
    options.max_binding_bytes = 11000;
    Context small(options);
    DecodeCase c = pooled_case();
    const bool swapped = GENERATE(false, true);
    c.k_type = swapped ? DType::q5_0 : DType::q8_0;
    c.v_type = swapped ? DType::q8_0 : DType::q5_0;
    c.impl = Impl::split;
    c.variant.shared_tiles = false;
    c.dim = 128;
    c.dim_v = 160;
    c.steps = 2;
    c.seed = 92;
    INFO("K " << to_string(*c.k_type) << ", V " << to_string(*c.v_type));
    PagedKvCache probe(small, {.batch = 1, .kv_heads = c.kv_heads, .num_blocks = c.num_blocks, .block_size = c.block_size,
                               .dim = c.dim, .dim_v = c.dim_v, .dtype = *c.k_type, .dtype_v = *c.v_type});
    CHECK(probe.k_pools().size() == (swapped ? 4u : 3u));
    decode_twice(small, c, true);
    const std::string messages = test::take_validation_messages(small);
    INFO(messages);
    CHECK(messages.empty());
}


TEST_CASE("paged kv cache: the decode kernel through several pools of ggml blocks", "[gpu][cache][paged][decode]") {
    ContextOptions options = test::test_context_options();
    options.max_binding_bytes = 11000;  // q8_0 K and q5_0 V over 3 pools (the test above's)
    Context small(options);
    DecodeCase c = pooled_case();
    c.k_type = DType::q8_0;
    c.v_type = DType::q5_0;
    c.impl = Impl::split;
    c.variant.fused_kernel = FusedKernel::decode;
    c.dim = 128;
    c.dim_v = 160;
    c.steps = 2;
    c.seed = 93;
    decode_twice(small, c, true);
    CHECK(test::take_validation_messages(small).empty());
}
TEST_CASE("paged attention reads the caller's pools in FlashAttention's row-major layout or head-major alike",
          "[gpu][cache][paged]") {
    // Pools [9 blocks, 5 rows, 2 heads, D] made by the caller, a shuffled table, lengths ending
    // mid-block, 3 queries per sequence: the reference over the keys gathered through the table.
    Context& ctx = test::gpu_context();
    std::mt19937 rng(23);
    const std::int64_t B = 2, Hq = 4, Hkv = 2, bs = 5, blocks = 9, max_blocks = 4, D = 16, Dv = 12, Nq = 3;
    const HostTensor k_pool = random_tensor(rng, DType::f32, Layout::bhnd, {blocks, bs, Hkv, D});
    const HostTensor v_pool = random_tensor(rng, DType::f32, Layout::bhnd, {blocks, bs, Hkv, Dv});
    const std::vector<std::int32_t> table{7, 2, 5, -1, 0, 8, 3, 6}, lengths{13, 20};
    const HostTensor q_host = random_tensor(rng, DType::f32, Layout::bhnd, {B, Hq, Nq, D});
    HostKvCache want(DType::f32, B, Hkv, max_blocks * bs, D, Dv);
    want.lengths = lengths;
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t n = 0; n < lengths[static_cast<std::size_t>(b)]; ++n)
            for (std::int64_t h = 0; h < Hkv; ++h) {
                const std::int64_t block = table[static_cast<std::size_t>(b * max_blocks + n / bs)];
                for (std::int64_t d = 0; d < D; ++d)
                    want.k.f32[static_cast<std::size_t>(want.k.view().offset(b, h, n, d))] = k_pool.at(block, n % bs, h, d);
                for (std::int64_t d = 0; d < Dv; ++d)
                    want.v.f32[static_cast<std::size_t>(want.v.view().offset(b, h, n, d))] = v_pool.at(block, n % bs, h, d);
            }
    const DeviceTensor q = DeviceTensor::from_host(ctx, q_host.view());
    const DeviceTensor o = DeviceTensor::empty(ctx, DType::f32, {B, Hq, Nq, Dv});
    DeviceAttentionInputs in{.q = q,
                             .kv_lengths = DeviceTensor::from_host(
                                 ctx, make_view<const void*>(lengths.data(), DType::i32, Layout::bhnd, {B, 1, 1, 1}))};
    in.paged.block_table =
        DeviceTensor::from_host(ctx, make_view<const void*>(table.data(), DType::i32, Layout::bhnd, {B, 1, 1, max_blocks}));
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = impl};
    std::vector<std::vector<float>> outputs;
    for (const Layout layout : {Layout::bhnd, Layout::bnhd}) {  // row-major; head-major within a block
        in.paged.k_pools = {DeviceTensor::from_host(ctx, k_pool.view(), layout)};
        in.paged.v_pools = {DeviceTensor::from_host(ctx, v_pool.view(), layout)};
        const AttentionReport report = attention(ctx, in, {o}, options);
        CHECK(report.path == impl);
        HostTensor got = nan_tensor(DType::f32, Layout::bhnd, o.shape());
        o.download(got.mutable_view());
        test::check_step(q_host, got, want, options, to_string(impl));
        outputs.push_back(floats_of(got));
    }
    CHECK(outputs[0] == outputs[1]);  // the same arithmetic at other addresses
    // A V pool in another layout than K's is refused, naming it.
    in.paged.k_pools = {DeviceTensor::from_host(ctx, k_pool.view(), Layout::bhnd)};
    in.paged.v_pools = {DeviceTensor::from_host(ctx, v_pool.view(), Layout::bnhd)};
    CHECK_THROWS_WITH(attention(ctx, in, {o}, options), Catch::Contains("paged.v_pools[0]") && Catch::Contains("layout"));
    CHECK(test::take_validation_messages(ctx).empty());
}

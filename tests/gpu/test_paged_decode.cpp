// Attention over the paged KV cache: random block tables (shuffled, non-contiguous blocks; lengths
// ending mid-block; GQA; f16, fp8 and ggml-block pools; pools over several bindings; the caller's
// pools in either layout) match the reference and give the contiguous cache's outputs bit for bit.
#include "support/catch.hpp"

#include <algorithm>
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
using test::download_i32;
using test::floats_of;
using test::host_cache;
using test::rows_on_device;
using test::shuffled_table;

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
    if (c.variant.workgroup_matrices == true)
        CHECK_THAT(plan_paged.report().variant, Catch::Contains(" workgroup ") && Catch::Contains(" staged"));
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
    // with two and K and V in tiles of their own) and flash_cm2.comp forced: their lanes look keys'
    // rows up in the block table; the same kernel over the contiguous cache computes the same bits.
    Context& ctx = test::gpu_context();
    DecodeCase c;
    c.dtype = GENERATE(DType::f32, DType::f16, DType::bf16);
    c.block_size = GENERATE(16, 7, 1);
    const int which = GENERATE(0, 1, 2, 3, 4);
    const FusedKernel kernel = which == 0 ? FusedKernel::decode : which == 1 ? FusedKernel::tile : FusedKernel::coopmat;
    if (which == 3) {
        c.variant.row_tiles = 2;
        c.variant.kv_apart = true;
    }
    if (which == 4) {  // flash_cm2.comp, which stages a paged cache's rows (f16 or bf16 operands)
        if (c.dtype == DType::f32 || (c.dtype == DType::bf16 && !test::workgroup_bf16_runs_here())) return;
        c.variant.workgroup_matrices = true;
        // The contiguous cache's tensor loads need no stage, so unforced its tiles could be longer
        // than the paged run's: the same tiles for both, for the same bits.
        c.variant.tile_keys = 32;
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
    INFO(to_string(c.dtype) << ", block size " << c.block_size << ", " << to_string(kernel)
                            << (which == 3 ? " rt2 kv-apart " : which == 4 ? " workgroup " : " ")
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

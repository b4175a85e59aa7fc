// The contiguous KV cache: appends land exactly where the lengths say (checked element by element
// against a host model of the cache), the lengths advance on the device, bad appends are refused
// before anything is recorded, a decode loop over the cache matches the CPU reference on every
// path, and a cache over several bindings appends and attends exactly as one binding does.
#include "support/catch.hpp"

#include <cmath>
#include <optional>
#include <random>

#include "support/cache_support.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

using test::download_floats;
using test::floats_of;
using test::host_cache;
using test::rows_on_device;

std::vector<std::int32_t> download_lengths(const KvCache& cache) { return test::download_i32(cache.lengths()); }

void check_cache(const KvCache& cache, const HostKvCache& want) {
    CHECK(download_lengths(cache) == want.lengths);
    CHECK(cache.recorded_lengths() == want.lengths);
    CHECK(download_floats(cache.k()) == floats_of(want.k));  // exact: a copy (and one rounding to the cache's dtype)
    CHECK(download_floats(cache.v()) == floats_of(want.v));
    test::check_same_bytes(cache.k(), want.k);  // bf16 and blocks: byte for byte the host's (ggml's) encoding
    test::check_same_bytes(cache.v(), want.v);
}

void append_and_check(Context& ctx, DType in, DType stored, std::int64_t dim = 24, std::int64_t dim_v = 20,
                      std::optional<DType> stored_v = {}, std::vector<float> k_scale = {}, std::vector<float> v_scale = {}) {
    std::mt19937 rng(static_cast<unsigned>(in) * 3 + static_cast<unsigned>(stored) + 17);
    const KvCacheOptions o{.batch = 3, .kv_heads = 2, .capacity = 37, .dim = dim, .dim_v = dim_v, .dtype = stored,
                           .dtype_v = stored_v, .k_scale = k_scale, .v_scale = v_scale};
    KvCache cache(ctx, o);
    HostKvCache want = host_cache(o);
    check_cache(cache, want);  // zero at creation

    // A prefill of uneven prompts (one sequence empty), then single tokens, then a ragged chunk.
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
    // A reset to chosen lengths: the rows stay, the next append overwrites from there.
    Batch batch(ctx);
    const std::vector<std::int32_t> lengths{2, 36, 0};
    cache.reset(batch, lengths);
    HostTensor k_host, v_host;
    const DeviceTensor k_new = rows_on_device(ctx, rng, in, o.batch, o.kv_heads, 1, o.dim, k_host);
    const DeviceTensor v_new = rows_on_device(ctx, rng, in, o.batch, o.kv_heads, 1, o.dim_v, v_host);
    cache.append(batch, k_new, v_new);
    batch.submit().wait();
    want.lengths = lengths;
    want.append(k_host, v_host);
    check_cache(cache, want);
}

}  // namespace

TEST_CASE("kv cache: appends land at each sequence's length, exactly, and advance the lengths", "[gpu][cache]") {
    Context& ctx = test::gpu_context();
    const DType in = GENERATE(DType::f32, DType::f16);
    const DType stored = GENERATE(DType::f32, DType::f16);
    INFO("new rows " << to_string(in) << ", cache " << to_string(stored));
    append_and_check(ctx, in, stored);
    const std::string messages = test::take_validation_messages(ctx);
    INFO(messages);
    CHECK(messages.empty());
}

TEST_CASE("kv cache: appends quantize to bf16 and ggml's blocks on the device, bit for bit the host's blocks",
          "[gpu][cache][storage_types]") {
    Context& ctx = test::gpu_context();
    const DType in = GENERATE(DType::f32, DType::f16, DType::bf16);
    const DType stored = GENERATE(DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::iq4_nl);
    INFO("new rows " << to_string(in) << ", cache " << to_string(stored));
    append_and_check(ctx, in, stored, 96, 32);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("kv cache: fp8 caches divide by their scales, and K and V may have different types", "[gpu][cache][storage_types]") {
    Context& ctx = test::gpu_context();
    // vLLM's fp8(x / scale) per head and per tensor, beside a block type, a float and each other.
    append_and_check(ctx, DType::f32, DType::fp8_e4m3, 64, 32, DType::q8_0, {0.5f, 2.0f});
    append_and_check(ctx, DType::f16, DType::f32, 24, 20, DType::fp8_e5m2, {}, {0.25f});
    append_and_check(ctx, DType::bf16, DType::fp8_e5m2, 24, 20, DType::fp8_e4m3);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("kv cache: bad options and appends name the argument and record nothing", "[gpu][cache]") {
    Context& ctx = test::gpu_context();
    CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 1, .capacity = 0, .dim = 8}), Catch::Contains("capacity"));
    CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 1, .capacity = 4, .dim = 8, .dtype = DType::i32}),
                      Catch::Contains("dtype"));
    CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 1, .capacity = 4, .dim = 8, .dim_v = 7, .dtype_v = DType::fp8_e4m3}),
                      Catch::StartsWith("dim_v: ") && Catch::Contains("even"));
    CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 2, .capacity = 4, .dim = 8, .dtype = DType::fp8_e4m3,
                                    .k_scale = {1.0f, 2.0f, 3.0f}}),
                      Catch::StartsWith("k_scale: ") && Catch::Contains("Hkv = 2"));
    CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 1, .capacity = 4, .dim = 8, .v_scale = {2.0f}}),
                      Catch::StartsWith("v_scale: ") && Catch::Contains("fp8 v only"));
    const KvCacheOptions o{.batch = 2, .kv_heads = 2, .capacity = 6, .dim = 8};
    KvCache cache(ctx, o);
    std::mt19937 rng(3);
    HostTensor host;
    const DeviceTensor k4 = rows_on_device(ctx, rng, DType::f32, 2, 2, 4, 8, host);
    const DeviceTensor k3 = rows_on_device(ctx, rng, DType::f32, 2, 2, 3, 8, host);
    const DeviceTensor h16 = rows_on_device(ctx, rng, DType::f16, 2, 2, 4, 8, host);
    const DeviceTensor wide = rows_on_device(ctx, rng, DType::f32, 2, 2, 4, 9, host);
    Batch batch(ctx);
    CHECK_THROWS_WITH(cache.append(batch, wide, k4), Catch::Contains("k_new") && Catch::Contains("[2, 2, T >= 1, 8]"));
    CHECK_THROWS_WITH(cache.append(batch, k4, k3), Catch::Contains("v_new") && Catch::Contains("3 new rows"));
    CHECK_THROWS_WITH(cache.append(batch, k4, h16), Catch::Contains("v_new") && Catch::Contains("one dtype"));
    const std::vector<std::int32_t> too_many{5, 1}, wrong_size{1};
    CHECK_THROWS_WITH(cache.append(batch, k4, k4, too_many), Catch::Contains("counts[0] = 5"));
    CHECK_THROWS_WITH(cache.append(batch, k4, k4, wrong_size), Catch::Contains("counts"));
    cache.append(batch, k4, k4);  // 4 of 6
    CHECK_THROWS_WITH(cache.append(batch, k3, k3), Catch::Contains("sequence 0 holds 4 of its 6 rows"));
    const std::vector<std::int32_t> bad_reset{7, 0};
    CHECK_THROWS_WITH(cache.reset(batch, bad_reset), Catch::Contains("lengths[0] = 7"));
    Context other(test::test_context_options());
    Batch foreign(other);
    CHECK_THROWS_WITH(cache.append(foreign, k4, k4), Catch::Contains("another Context"));
    batch.submit().wait();
    CHECK(download_lengths(cache) == std::vector<std::int32_t>{4, 4});  // only the append that passed
    CHECK(cache.recorded_lengths() == std::vector<std::int32_t>{4, 4});
    CHECK(test::take_validation_messages(ctx).empty());
}

namespace {

// Prompts of uneven lengths prefilled, then decode steps: append one token per sequence, attend
// with the newest query (bottom-right causal), compare with the reference over the host model.
void decode_and_check(Context& ctx, DType dtype, Impl impl, const KvCacheOptions& base, std::int64_t Hq,
                      std::vector<std::int32_t> prompts, int steps, unsigned seed, std::optional<DType> stored = {}) {
    KvCacheOptions o = base;
    o.dtype = stored.value_or(dtype);  // the cache's; q and the new rows are `dtype`
    std::mt19937 rng(seed);
    KvCache cache(ctx, o);
    HostKvCache want = host_cache(o);
    std::int64_t longest = 0;
    for (auto p : prompts) longest = std::max<std::int64_t>(longest, p);
    HostTensor k_host, v_host;
    DeviceTensor k_new = rows_on_device(ctx, rng, dtype, o.batch, o.kv_heads, longest, o.dim, k_host);
    DeviceTensor v_new = rows_on_device(ctx, rng, dtype, o.batch, o.kv_heads, longest, o.dim_v, v_host);
    {
        Batch batch(ctx);
        cache.append(batch, k_new, v_new, prompts);
        batch.submit().wait();
        want.append(k_host, v_host, prompts);
    }
    const DeviceTensor q = DeviceTensor::empty(ctx, dtype, {o.batch, Hq, 1, o.dim});
    const DeviceTensor out = DeviceTensor::empty(ctx, dtype, {o.batch, Hq, 1, o.dim_v});
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = impl, .splits = impl == Impl::split ? 3u : 0u};
    const AttentionPlan plan(ctx, cache.inputs(q), {out}, options);
    const DeviceTensor k_step = DeviceTensor::empty(ctx, dtype, {o.batch, o.kv_heads, 1, o.dim});
    const DeviceTensor v_step = DeviceTensor::empty(ctx, dtype, {o.batch, o.kv_heads, 1, o.dim_v});
    for (int step = 0; step < steps; ++step) {
        const HostTensor q_host = random_tensor(rng, dtype, Layout::bhnd, q.shape());
        k_host = random_tensor(rng, dtype, Layout::bhnd, k_step.shape());
        v_host = random_tensor(rng, dtype, Layout::bhnd, v_step.shape());
        HostTensor o_host = nan_tensor(dtype, Layout::bhnd, out.shape());
        Batch batch(ctx);
        batch.upload(q, q_host.view());
        batch.upload(k_step, k_host.view());
        batch.upload(v_step, v_host.view());
        cache.append(batch, k_step, v_step);
        plan.run(batch, cache.inputs(q), {out});
        batch.download(out, o_host.mutable_view());
        batch.submit().wait();
        want.append(k_host, v_host);
        test::check_step(q_host, o_host, want, options, "step " + std::to_string(step) + ", " + plan.report().variant);
    }
    CHECK(download_lengths(cache) == want.lengths);
    CHECK(plan.stats().bindings_built == 1);  // every step replays the same program
    if (impl != Impl::automatic) CHECK(plan.report().path == impl);
}

}  // namespace

TEST_CASE("kv cache: a decode loop over the cache matches the reference on every path", "[gpu][cache]") {
    Context& ctx = test::gpu_context();
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    INFO(to_string(dtype) << " " << to_string(impl));
    decode_and_check(ctx, dtype, impl, {.batch = 3, .kv_heads = 2, .capacity = 70, .dim = 32, .dim_v = 24}, 6,
                     {23, 1, 61}, 5, 40 + static_cast<unsigned>(impl));
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("kv cache: decoding over a bf16 or quantized cache matches the reference on its values", "[gpu][cache][storage_types]") {
    Context& ctx = test::gpu_context();
    // One path and query dtype per cache type (each set of types compiles pipelines of its own).
    const auto [stored, dtype, impl] = GENERATE(table<DType, DType, Impl>({{DType::bf16, DType::bf16, Impl::unfused},
                                                                          {DType::q8_0, DType::f32, Impl::split},
                                                                          {DType::q4_1, DType::f16, Impl::fused},
                                                                          {DType::q5_0, DType::f32, Impl::unfused},
                                                                          {DType::iq4_nl, DType::bf16, Impl::split}}));
    INFO(to_string(dtype) << " over a " << to_string(stored) << " cache, " << to_string(impl));
    decode_and_check(ctx, dtype, impl, {.batch = 2, .kv_heads = 2, .capacity = 90, .dim = 64, .dim_v = 32}, 4,
                     {33, 70}, 3, 90 + static_cast<unsigned>(impl), stored);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("kv cache: decoding over fp8 caches with their scales, K and V of different types", "[gpu][cache][storage_types]") {
    Context& ctx = test::gpu_context();
    const auto [k_type, v_type, dtype, impl] = GENERATE(table<DType, DType, DType, Impl>(
        {{DType::fp8_e4m3, DType::fp8_e5m2, DType::f32, Impl::split}, {DType::f16, DType::fp8_e4m3, DType::f16, Impl::unfused}}));
    INFO(to_string(dtype) << " over a " << to_string(k_type) << " / " << to_string(v_type) << " cache, " << to_string(impl));
    KvCacheOptions o{.batch = 2, .kv_heads = 2, .capacity = 90, .dim = 40, .dim_v = 26, .dtype_v = v_type};
    if (is_fp8(k_type)) o.k_scale = {0.5f, 3.0f};
    o.v_scale = {0.125f};
    decode_and_check(ctx, dtype, impl, o, 4, {33, 70}, 3, 95 + static_cast<unsigned>(impl), k_type);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("kv cache: a cache over several bindings appends and attends exactly as over one", "[gpu][cache]") {
    // 20000-byte bindings: the cache (150 rows of 64 floats = 38400 bytes per head) is cut by rows,
    // a long prefill's new rows (100 rows per head) by runs of rows, and attention slices the keys
    // (its blocks of 64 keys need 16 KiB).
    ContextOptions options = test::test_context_options();
    options.max_binding_bytes = 20000;
    Context small(options);
    const KvCacheOptions o{.batch = 3, .kv_heads = 2, .capacity = 150, .dim = 64, .dim_v = 48};
    KvCache cache(small, o);
    HostKvCache want = host_cache(o);
    std::mt19937 rng(9);
    HostTensor k_host, v_host;
    const std::vector<std::int32_t> prompts{100, 37, 0};
    const DeviceTensor k_new = rows_on_device(small, rng, DType::f32, 3, 2, 100, 64, k_host);
    const DeviceTensor v_new = rows_on_device(small, rng, DType::f32, 3, 2, 100, 48, v_host);
    Batch batch(small);
    cache.append(batch, k_new, v_new, prompts);
    batch.submit().wait();
    want.append(k_host, v_host, prompts);
    check_cache(cache, want);
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    decode_and_check(small, DType::f32, impl, o, 4, prompts, 3, 77);
    const std::string messages = test::take_validation_messages(small);
    INFO(messages);
    CHECK(messages.empty());
}

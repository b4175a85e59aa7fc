// The contiguous KV cache: appends land exactly where the lengths say (checked element by element
// against a host model of the cache), the lengths advance on the device, bad appends are refused
// before anything is recorded, a decode loop over the cache matches the CPU reference on every
// path, and a cache over several bindings appends and attends exactly as one binding does.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

// The cache as the host expects it: K and V as floats already rounded to the cache's dtype, the
// rows past each length zero.
struct HostCache {
    std::int64_t B, H, capacity, Dk, Dv;
    DType dtype;
    std::vector<float> k, v;
    std::vector<std::int32_t> lengths;

    HostCache(const KvCacheOptions& o)
        : B(o.batch), H(o.kv_heads), capacity(o.capacity), Dk(o.dim), Dv(o.dim_v ? o.dim_v : o.dim), dtype(o.dtype),
          k(static_cast<std::size_t>(B * H * capacity * Dk), 0.0f), v(static_cast<std::size_t>(B * H * capacity * Dv), 0.0f),
          lengths(static_cast<std::size_t>(B), 0) {}

    float stored(float x) const { return dtype == DType::f16 ? half_to_float(float_to_half(x)) : x; }

    void append(const HostTensor& k_new, const HostTensor& v_new, const std::vector<std::int32_t>& counts) {
        for (std::int64_t b = 0; b < B; ++b) {
            const std::int64_t count = counts.empty() ? k_new.shape[2] : counts[static_cast<std::size_t>(b)];
            for (std::int64_t h = 0; h < H; ++h)
                for (std::int64_t t = 0; t < count; ++t) {
                    const std::int64_t row = lengths[static_cast<std::size_t>(b)] + t;
                    for (std::int64_t d = 0; d < Dk; ++d)
                        k[static_cast<std::size_t>(((b * H + h) * capacity + row) * Dk + d)] = stored(k_new.at(b, h, t, d));
                    for (std::int64_t d = 0; d < Dv; ++d)
                        v[static_cast<std::size_t>(((b * H + h) * capacity + row) * Dv + d)] = stored(v_new.at(b, h, t, d));
                }
            lengths[static_cast<std::size_t>(b)] += static_cast<std::int32_t>(count);
        }
    }

    TensorView k_view() const { return make_view<const void*>(k.data(), DType::f32, Layout::bhnd, {B, H, capacity, Dk}); }
    TensorView v_view() const { return make_view<const void*>(v.data(), DType::f32, Layout::bhnd, {B, H, capacity, Dv}); }
};

std::vector<float> download_floats(const DeviceTensor& t) {
    HostTensor host = nan_tensor(t.dtype(), Layout::bhnd, t.shape());
    t.download(host.mutable_view());
    std::vector<float> out;
    for (std::int64_t b = 0; b < t.shape()[0]; ++b)
        for (std::int64_t h = 0; h < t.shape()[1]; ++h)
            for (std::int64_t n = 0; n < t.shape()[2]; ++n)
                for (std::int64_t d = 0; d < t.shape()[3]; ++d) out.push_back(host.at(b, h, n, d));
    return out;
}

std::vector<std::int32_t> download_lengths(const KvCache& cache) {
    std::vector<std::int32_t> out(static_cast<std::size_t>(cache.options().batch), -1);
    cache.lengths().download(make_view<void*>(out.data(), DType::i32, Layout::bhnd, cache.lengths().shape()));
    return out;
}

void check_cache(const KvCache& cache, const HostCache& want) {
    CHECK(download_lengths(cache) == want.lengths);
    CHECK(cache.recorded_lengths() == want.lengths);
    CHECK(download_floats(cache.k()) == want.k);  // exact: a copy (and one rounding to the cache's dtype)
    CHECK(download_floats(cache.v()) == want.v);
}

// New rows as a device view at an offset: rows [1, 1 + T) of a bnhd tensor with two rows more.
DeviceTensor rows_on_device(Context& ctx, std::mt19937& rng, DType dtype, std::int64_t B, std::int64_t H, std::int64_t T,
                            std::int64_t D, HostTensor& host) {
    const HostTensor all = random_tensor(rng, dtype, Layout::bnhd, {B, H, T + 2, D});
    host = nan_tensor(dtype, Layout::bhnd, {B, H, T, D});
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t t = 0; t < T; ++t)
                for (std::int64_t d = 0; d < D; ++d) {
                    const auto at = static_cast<std::size_t>(host.view().offset(b, h, t, d));
                    const auto from = static_cast<std::size_t>(all.view().offset(b, h, t + 1, d));
                    if (dtype == DType::f32) host.f32[at] = all.f32[from];
                    else host.f16[at] = all.f16[from];
                }
    return DeviceTensor::from_host(ctx, all.view(), Layout::bnhd).seq(1, T);
}

void append_and_check(Context& ctx, DType in, DType stored) {
    std::mt19937 rng(static_cast<unsigned>(in) * 3 + static_cast<unsigned>(stored) + 17);
    const KvCacheOptions o{.batch = 3, .kv_heads = 2, .capacity = 37, .dim = 24, .dim_v = 20, .dtype = stored};
    KvCache cache(ctx, o);
    HostCache want(o);
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
    want.append(k_host, v_host, {});
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

TEST_CASE("kv cache: bad options and appends name the argument and record nothing", "[gpu][cache]") {
    Context& ctx = test::gpu_context();
    CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 1, .capacity = 0, .dim = 8}), Catch::Contains("capacity"));
    CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 1, .capacity = 4, .dim = 8, .dtype = DType::i32}),
                      Catch::Contains("dtype"));
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
                      std::vector<std::int32_t> prompts, int steps, unsigned seed) {
    KvCacheOptions o = base;
    o.dtype = dtype;
    std::mt19937 rng(seed);
    KvCache cache(ctx, o);
    HostCache want(o);
    std::int64_t longest = 0;
    for (auto p : prompts) longest = std::max<std::int64_t>(longest, p);
    HostTensor k_host, v_host;
    DeviceTensor k_new = rows_on_device(ctx, rng, dtype, o.batch, o.kv_heads, longest, o.dim, k_host);
    DeviceTensor v_new = rows_on_device(ctx, rng, dtype, o.batch, o.kv_heads, longest, o.dim_v, v_host);
    {
        Batch batch(ctx);
        cache.append(batch, k_new, v_new, prompts);
        batch.submit().wait();
        want.append(k_host, v_host, {prompts.begin(), prompts.end()});
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
        want.append(k_host, v_host, {});

        HostTensor ref = nan_tensor(dtype, Layout::bhnd, out.shape());
        std::vector<float> q32(static_cast<std::size_t>(q_host.count()));
        for (std::size_t i = 0; i < q32.size(); ++i) q32[i] = dtype == DType::f32 ? q_host.f32[i] : half_to_float(q_host.f16[i]);
        std::vector<float> ref32(static_cast<std::size_t>(ref.count()));
        reference_attention({.q = make_view<const void*>(q32.data(), DType::f32, Layout::bhnd, q.shape()),
                             .k = want.k_view(), .v = want.v_view(), .kv_lengths = want.lengths},
                            {.o = make_view<void*>(ref32.data(), DType::f32, Layout::bhnd, out.shape())}, options);
        std::vector<double> got, expected(ref32.begin(), ref32.end());
        for (std::int64_t b = 0; b < o.batch; ++b)
            for (std::int64_t h = 0; h < Hq; ++h)
                for (std::int64_t d = 0; d < o.dim_v; ++d) got.push_back(o_host.at(b, h, 0, d));
        const Comparison cmp = compare(got, expected, tolerance_for(dtype));
        INFO("step " << step << ", " << plan.report().variant << ": " << cmp.message);
        REQUIRE(cmp.ok);
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

TEST_CASE("kv cache: a cache over several bindings appends and attends exactly as over one", "[gpu][cache]") {
    // 20000-byte bindings: the cache (150 rows of 64 floats = 38400 bytes per head) is cut by rows,
    // a long prefill's new rows (100 rows per head) by runs of rows, and attention slices the keys
    // (its blocks of 64 keys need 16 KiB).
    ContextOptions options = test::test_context_options();
    options.max_binding_bytes = 20000;
    Context small(options);
    const KvCacheOptions o{.batch = 3, .kv_heads = 2, .capacity = 150, .dim = 64, .dim_v = 48};
    KvCache cache(small, o);
    HostCache want(o);
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

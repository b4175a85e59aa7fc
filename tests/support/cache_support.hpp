// What the KV-cache tests share: new rows on the device at an offset, downloads as floats and
// ints, and one decode step's check against the CPU reference over the host model of the cache.
#pragma once

#include "support/catch.hpp"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/host_kv_cache.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::test {

// A tensor's elements as floats, in (b, h, n, d) order.
inline std::vector<float> download_floats(const DeviceTensor& t) {
    testing::HostTensor host = testing::nan_tensor(t.dtype(), Layout::bhnd, t.shape());
    t.download(host.mutable_view());
    std::vector<float> out;
    for (std::int64_t b = 0; b < t.shape()[0]; ++b)
        for (std::int64_t h = 0; h < t.shape()[1]; ++h)
            for (std::int64_t n = 0; n < t.shape()[2]; ++n)
                for (std::int64_t d = 0; d < t.shape()[3]; ++d) out.push_back(host.at(b, h, n, d));
    return out;
}

// A tensor of bf16 or a block type holds exactly the host model's bytes (f32 and f16 are compared
// as floats).
inline void check_same_bytes(const DeviceTensor& t, const testing::HostTensor& want) {
    if (want.bytes.empty()) return;
    testing::HostTensor got = testing::zero_tensor(t.dtype(), Layout::bhnd, t.shape());
    if (!is_block_type(t.dtype())) got.bytes.assign(want.bytes.size(), 0xa5);
    t.download(got.mutable_view());
    CHECK(got.bytes == want.bytes);
}

// A contiguous i32 tensor's elements (lengths, a block table).
inline std::vector<std::int32_t> download_i32(const DeviceTensor& t) {
    std::vector<std::int32_t> out(static_cast<std::size_t>(t.elements()), -7);
    t.download(make_view<void*>(out.data(), DType::i32, Layout::bhnd, t.shape()));
    return out;
}

// The host model's tensor as floats, in (b, h, n, d) order.
inline std::vector<float> floats_of(const testing::HostTensor& t) {
    std::vector<float> out;
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h)
            for (std::int64_t n = 0; n < t.shape[2]; ++n)
                for (std::int64_t d = 0; d < t.shape[3]; ++d) out.push_back(t.at(b, h, n, d));
    return out;
}

// New rows as a device view at an offset: rows [1, 1 + T) of a bnhd tensor with two rows more;
// `host` gets the same rows, bhnd.
inline DeviceTensor rows_on_device(Context& ctx, std::mt19937& rng, DType dtype, std::int64_t B, std::int64_t H,
                                   std::int64_t T, std::int64_t D, testing::HostTensor& host) {
    const testing::HostTensor all = testing::random_tensor(rng, dtype, Layout::bnhd, {B, H, T + 2, D});
    host = testing::nan_tensor(dtype, Layout::bhnd, {B, H, T, D});
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t t = 0; t < T; ++t)
                for (std::int64_t d = 0; d < D; ++d) {
                    const auto at = static_cast<std::size_t>(host.view().offset(b, h, t, d));
                    const auto from = static_cast<std::size_t>(all.view().offset(b, h, t + 1, d));
                    if (dtype == DType::f32) host.f32[at] = all.f32[from];
                    else if (dtype == DType::f16) host.f16[at] = all.f16[from];
                    else std::memcpy(&host.bytes[2 * at], &all.bytes[2 * from], 2);  // bf16
                }
    return DeviceTensor::from_host(ctx, all.view(), Layout::bnhd).seq(1, T);
}

// One decode step's output `o` [B, Hq, 1, Dv] checked against the reference over the host model.
inline void check_step(const testing::HostTensor& q, const testing::HostTensor& o, const testing::HostKvCache& cache,
                       const AttentionOptions& options, const std::string& what) {
    // The reference in fp32 (q widened, o fp32) over the cache's own rows and scales.
    std::vector<float> q32(static_cast<std::size_t>(q.count()));
    for (std::size_t i = 0; i < q32.size(); ++i) q32[i] = load_element(q.data(), q.dtype, static_cast<std::int64_t>(i));
    AttentionInputs in = cache.inputs(q);
    in.q = make_view<const void*>(q32.data(), DType::f32, Layout::bhnd, q.shape);
    std::vector<float> ref32(static_cast<std::size_t>(o.count()));
    reference_attention(in, {.o = make_view<void*>(ref32.data(), DType::f32, Layout::bhnd, o.shape)}, options);
    const std::vector<float> got32 = floats_of(o);
    const testing::Comparison cmp = testing::compare({got32.begin(), got32.end()}, {ref32.begin(), ref32.end()},
                                                     testing::tolerance_for(o.dtype));
    INFO(what << ": " << cmp.message);
    REQUIRE(cmp.ok);
}

// The host model of a cache: its types, shape, capacity and scales, no rows yet.
inline testing::HostKvCache host_cache(const KvCacheOptions& o) {
    return testing::HostKvCache(o.dtype, o.batch, o.kv_heads, o.capacity, o.dim, o.dim_v ? o.dim_v : o.dim, o.dtype_v, o.k_scale,
                                o.v_scale);
}
inline testing::HostKvCache host_cache(const PagedKvCache& cache) {
    const PagedKvCacheOptions& o = cache.options();
    return testing::HostKvCache(o.dtype, o.batch, o.kv_heads, cache.capacity(), o.dim, o.dim_v, o.dtype_v, o.k_scale, o.v_scale);
}

}  // namespace vkattn::test

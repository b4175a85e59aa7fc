#include "cache/cache_args.hpp"

#include <string>
#include <tuple>

#include "attention/problem.hpp"
#include "runtime.hpp"
#include "tensor/storage.hpp"
#include "tensor/storage_rules.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// The rows' tensor checked against the cache: [batch, Hkv, rows, dim] (B sequences' rows, or one
// packed batch of them), f32, f16 or bf16, on this context.
void check_rows(const Runtime& runtime, const CacheShape& cache, const DeviceTensor& t, std::int64_t batch,
                const char* rows, std::int64_t dim, const char* name) {
    storage_of(t, runtime, name);
    if (!is_activation_type(t.dtype()))
        throw InvalidArgument(name, "its dtype is " + to_string(t.dtype()) + "; new keys and values are f32, f16 or bf16 "
                                    "(the cache quantizes them to its own type).");
    const auto& sh = t.shape();
    if (sh[0] != batch || sh[1] != cache.kv_heads || sh[3] != dim || sh[2] < 1)
        throw InvalidArgument(name, "its shape is " + shape_text(sh) + " but the cache takes [" + std::to_string(batch) +
                                        ", " + std::to_string(cache.kv_heads) + ", " + rows + " >= 1, " + std::to_string(dim) + "].");
}

// New keys and values: one dtype, the same rows.
void check_pair(const DeviceTensor& k_new, const DeviceTensor& v_new) {
    if (v_new.dtype() != k_new.dtype())
        throw InvalidArgument("v_new", "its dtype is " + to_string(v_new.dtype()) + " but k_new's is " +
                                           to_string(k_new.dtype()) + "; new keys and values share one dtype.");
    if (v_new.shape()[2] != k_new.shape()[2])
        throw InvalidArgument("v_new", "it holds " + std::to_string(v_new.shape()[2]) + " new rows but k_new holds " +
                                           std::to_string(k_new.shape()[2]) + ".");
}

}  // namespace

CacheTypes check_cache_types(const Runtime& runtime, DType dtype, std::optional<DType> dtype_v, std::int64_t kv_heads,
                             std::int64_t dim, std::int64_t dim_v, std::span<const float> k_scale,
                             std::span<const float> v_scale) {
    CacheTypes types{dtype, dtype_v.value_or(dtype), {}};
    for (const auto& [t, d, name, dim_name] : {std::tuple{types.k, dim, "dtype", "dim"}, std::tuple{types.v, dim_v, "dtype_v", "dim_v"}}) {
        if (!is_kv_type(t))
            throw InvalidArgument(name, "a KV cache stores a float type (f32, f16, bf16), one of ggml's blocks (q8_0, q4_0, "
                                        "q4_1, q5_0, q5_1, iq4_nl) or fp8 (fp8_e4m3, fp8_e5m2), not " + to_string(t) + ".");
        const auto block = static_cast<std::int64_t>(block_elements(t));
        if (d % block != 0)
            throw InvalidArgument(dim_name, "it is " + std::to_string(d) + "; a " + to_string(t) + " cache stores blocks of " +
                                                std::to_string(block) + " features, so it must be a multiple of " +
                                                std::to_string(block) + ".");
        if (is_fp8(t) && d % 2 != 0)
            throw InvalidArgument(dim_name, "it is " + std::to_string(d) + "; a " + to_string(t) + " cache stores its rows "
                                            "two bytes at a time, so it must be even.");
    }
    if (types.k != DType::f32) vk::require_fp16_storage(runtime.device().caps(), "dtype", types.k);
    if (types.v != DType::f32) vk::require_fp16_storage(runtime.device().caps(), "dtype_v", types.v);
    types.scales = fp8_scale_terms(resolve_fp8_scale(k_scale, types.k, kv_heads, "k_scale", "k"),
                                   resolve_fp8_scale(v_scale, types.v, kv_heads, "v_scale", "v"), kv_heads);
    return types;
}

void check_size(std::int64_t value, std::int64_t most, const char* name) {
    if (value < 1 || value > most)
        throw InvalidArgument(name, "must be in [1, " + std::to_string(most) + "], not " + std::to_string(value) + ".");
}

AppendRows appended_rows(const Runtime& runtime, const CacheShape& cache, const DeviceTensor& k_new,
                         const DeviceTensor& v_new, std::span<const std::int32_t> counts) {
    check_rows(runtime, cache, k_new, cache.batch, "T", cache.dim, "k_new");
    check_rows(runtime, cache, v_new, cache.batch, "T", cache.dim_v, "v_new");
    check_pair(k_new, v_new);
    const std::int64_t T = k_new.shape()[2];
    const auto B = static_cast<std::size_t>(cache.batch);
    if (counts.empty()) return {std::vector<std::int64_t>(B, T), T, 0, {}};
    if (counts.size() != B)
        throw InvalidArgument("counts", "it holds " + std::to_string(counts.size()) + " counts but the cache has " +
                                            std::to_string(B) + " sequences.");
    for (std::size_t b = 0; b < B; ++b)
        if (counts[b] < 0 || counts[b] > T)
            throw InvalidArgument("counts", "counts[" + std::to_string(b) + "] = " + std::to_string(counts[b]) +
                                                " is outside [0, " + std::to_string(T) + "] (the new rows).");
    return {{counts.begin(), counts.end()}, T, 1, {counts.begin(), counts.end()}};
}

AppendRows packed_rows(const Runtime& runtime, const CacheShape& cache, const DeviceTensor& k_new,
                       const DeviceTensor& v_new, std::span<const std::int32_t> cu) {
    check_rows(runtime, cache, k_new, 1, "total", cache.dim, "k_new");
    check_rows(runtime, cache, v_new, 1, "total", cache.dim_v, "v_new");
    check_pair(k_new, v_new);
    const auto B = static_cast<std::size_t>(cache.batch);
    const std::int64_t total = k_new.shape()[2];
    if (cu.size() != B + 1)
        throw InvalidArgument("cu_seqlens", "it holds " + std::to_string(cu.size()) + " offsets but the cache's " +
                                                std::to_string(B) + " sequences need " + std::to_string(B + 1) + ".");
    if (cu[0] != 0 || cu[B] != total)
        throw InvalidArgument("cu_seqlens", "it runs from " + std::to_string(cu[0]) + " to " + std::to_string(cu[B]) +
                                                " but must run from 0 to the " + std::to_string(total) + " packed rows.");
    AppendRows rows{{}, 1, 2, std::vector<std::int32_t>(2 * B)};
    for (std::size_t b = 0; b < B; ++b) {
        if (cu[b + 1] < cu[b])
            throw InvalidArgument("cu_seqlens", "it decreases from " + std::to_string(cu[b]) + " to " +
                                                    std::to_string(cu[b + 1]) + " at sequence " + std::to_string(b) + ".");
        rows.added.push_back(cu[b + 1] - cu[b]);
        rows.new_rows = std::max<std::int64_t>(rows.new_rows, cu[b + 1] - cu[b]);
        rows.values[b] = cu[b + 1] - cu[b];
        rows.values[B + b] = cu[b];
    }
    return rows;
}

std::vector<std::int32_t> reset_lengths(const CacheShape& cache, std::span<const std::int32_t> lengths,
                                        std::int64_t capacity) {
    const auto B = static_cast<std::size_t>(cache.batch);
    if (lengths.empty()) return std::vector<std::int32_t>(B, 0);
    if (lengths.size() != B)
        throw InvalidArgument("lengths", "it holds " + std::to_string(lengths.size()) + " lengths but the cache has " +
                                             std::to_string(B) + " sequences.");
    for (std::size_t b = 0; b < B; ++b)
        if (lengths[b] < 0 || lengths[b] > capacity)
            throw InvalidArgument("lengths", "lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
                                                 " is outside [0, " + std::to_string(capacity) + "].");
    return {lengths.begin(), lengths.end()};
}

}  // namespace vkattn::detail

// The argument rules both KV caches share (KvCache, PagedKvCache): option sizes, an append's new
// rows and counts, a reset's lengths.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

class Runtime;

// What every cache holds per sequence and head.
struct CacheShape {
    std::int64_t batch = 0, kv_heads = 0, dim = 0, dim_v = 0;
};

// InvalidArgument naming `name` unless value is in [1, most].
void check_size(std::int64_t value, std::int64_t most, const char* name);

// What an append writes: the rows each sequence gains, the rows per sequence of the new tensors,
// and what the shader reads of them (AppendParams::has_counts: 0 all rows, 1 counts, 2 counts then
// the packed rows' first rows) with the values uploaded for it.
struct AppendRows {
    std::vector<std::int64_t> added;
    std::int64_t new_rows = 0;
    std::uint32_t mode = 0;
    std::vector<std::int32_t> values;  // B counts, then (mode 2) B first rows
};

// A cache's storage, resolved: K's and V's types and the scales the append divides fp8 rows by.
struct CacheTypes {
    DType k = DType::f32, v = DType::f32;
    std::vector<float> scales;  // [2·Hkv]: K's per head, then V's (1 for a type without scales)
};

// K's type `dtype` and V's `dtype_v` (unset: dtype): each any float, block or fp8 type (a block
// type's dim multiple of 32, an fp8 type's even: its rows are stored two bytes at a time); 16-bit
// storage unless both are f32 (the append stores 16-bit halves); the fp8 scales as attention takes
// them (resolve_fp8_scale). InvalidArgument naming "dtype", "dtype_v", "dim", "dim_v", "k_scale" or
// "v_scale" otherwise.
CacheTypes check_cache_types(const Runtime& runtime, DType dtype, std::optional<DType> dtype_v, std::int64_t kv_heads,
                             std::int64_t dim, std::int64_t dim_v, std::span<const float> k_scale,
                             std::span<const float> v_scale);

// An append's k_new [B, Hkv, T, Dk] and v_new [B, Hkv, T, Dv] (f32, f16 or bf16, one dtype, this
// context) and counts (each in [0, T]; empty: T for all) checked against the cache.
// InvalidArgument naming the argument otherwise.
AppendRows appended_rows(const Runtime& runtime, const CacheShape& cache, const DeviceTensor& k_new,
                         const DeviceTensor& v_new, std::span<const std::int32_t> counts);

// Packed new rows (varlen): k_new [1, Hkv, total, Dk], v_new [1, Hkv, total, Dv], sequence b's at
// rows [cu_seqlens[b], cu_seqlens[b + 1]) (B + 1 host offsets, 0 first, nondecreasing, total last).
AppendRows packed_rows(const Runtime& runtime, const CacheShape& cache, const DeviceTensor& k_new,
                       const DeviceTensor& v_new, std::span<const std::int32_t> cu_seqlens);

// A reset's lengths checked (B of them, each in [0, capacity]; empty: all 0).
std::vector<std::int32_t> reset_lengths(const CacheShape& cache, std::span<const std::int32_t> lengths,
                                        std::int64_t capacity);

}  // namespace vkattn::detail

// The argument rules both KV caches share (KvCache, PagedKvCache): option sizes, an append's new
// rows and counts, a reset's lengths.
#pragma once

#include <cstdint>
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

// An append's k_new [B, Hkv, T, Dk] and v_new [B, Hkv, T, Dv] (f32 or f16, one dtype, this
// context) and counts (each in [0, T]; empty: T for all) checked against the cache: the rows each
// sequence gains. InvalidArgument naming the argument otherwise.
std::vector<std::int64_t> appended_rows(const Runtime& runtime, const CacheShape& cache, const DeviceTensor& k_new,
                                        const DeviceTensor& v_new, std::span<const std::int32_t> counts);

// A reset's lengths checked (B of them, each in [0, capacity]; empty: all 0).
std::vector<std::int32_t> reset_lengths(const CacheShape& cache, std::span<const std::int32_t> lengths,
                                        std::int64_t capacity);

}  // namespace vkattn::detail

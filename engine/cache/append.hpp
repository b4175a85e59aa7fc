// The dispatches of a KV cache's append (shaders/kv_append.comp): the new rows written at each
// sequence's length (a paged cache's through its block table, one dispatch per pool), cut so that
// no binding passes the device's limit and no grid its counts, then the lengths advanced.
#pragma once

#include <span>
#include <vector>

#include "attention/params.hpp"
#include "plan/program.hpp"
#include "plan/program_cache.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

class Runtime;
struct BatchState;

// A paged cache's pools and block table, each bound whole.
struct AppendPools {
    std::vector<DeviceTensor> k, v;       // [blocks, block_size, Hkv, D] each
    DeviceTensor table;                   // i32 [B, 1, 1, table_stride]
    PagedKv addressing;
    TensorDesc k_desc, v_desc;            // the pools' strides (io.hpp's paged_operands)
};

struct AppendTensors {
    DeviceTensor k_new, v_new;      // [B, Hkv, T, Dk], [B, Hkv, T, Dv], or packed [1, Hkv, total, D]; one dtype
    DeviceTensor k_cache, v_cache;  // contiguous: [B, Hkv, capacity, Dk], [B, Hkv, capacity, Dv]
    const AppendPools* pools = nullptr;   // paged: instead of k_cache and v_cache
    DeviceTensor lengths;                 // i32 [B], alone in its memory
    DeviceTensor counts;                  // i32 [1, 1, 2, B], alone in its memory: counts, then packed first rows
    DeviceTensor scales;                  // f32 [1, 1, 1, 2·Hkv]: fp8 K's scales, then V's (1 for other types)
    std::uint32_t mode = 0;               // AppendParams::has_counts (AppendRows::mode)
    std::int64_t new_rows = 0;            // rows per sequence of the new tensors (the longest, packed)
};

// Appends the dispatches to `program`. Throws ResourceLimit when even one row of one head cannot
// be bound.
void record_append(Runtime& runtime, Program& program, const AppendTensors& tensors);

// An append recorded into a batch, as both caches do it: the counts (and packed first rows)
// uploaded when the mode reads them (already checked), then the program `programs` holds for these
// new rows (recorded on a miss); the batch keeps every tensor of `tensors` alive until its
// submission completes.
void run_append(Runtime& runtime, BatchState& batch, ProgramCache& programs, const AppendTensors& tensors,
                std::span<const std::int32_t> values);

}  // namespace vkattn::detail

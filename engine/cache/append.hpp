// The dispatches of a KV cache's append (shaders/kv_append.comp): the new rows written at each
// sequence's length (a paged cache's through its block table, one dispatch per pool), cut so that
// no binding passes the device's limit and no grid its counts, then the lengths advanced.
#pragma once

#include <vector>

#include "attention/params.hpp"
#include "plan/program.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

class Runtime;

// A paged cache's pools and block table, each bound whole.
struct AppendPools {
    std::vector<DeviceTensor> k, v;       // [blocks, block_size, Hkv, D] each
    DeviceTensor table;                   // i32 [B, 1, 1, table_stride]
    PagedKv addressing;
    TensorDesc k_desc, v_desc;            // the pools' strides (io.hpp's paged_operands)
};

struct AppendTensors {
    DeviceTensor k_new, v_new;      // [B, Hkv, T, Dk], [B, Hkv, T, Dv]; one dtype
    DeviceTensor k_cache, v_cache;  // contiguous: [B, Hkv, capacity, Dk], [B, Hkv, capacity, Dv]
    const AppendPools* pools = nullptr;   // paged: instead of k_cache and v_cache
    const vk::Buffer* lengths = nullptr;  // [B] int32, the whole buffer
    const vk::Buffer* counts = nullptr;   // [B] int32, the whole buffer (read when has_counts)
    bool has_counts = false;
};

// Appends the dispatches to `program`. Throws ResourceLimit when even one row of one head cannot
// be bound.
void record_append(Runtime& runtime, Program& program, const AppendTensors& tensors);

}  // namespace vkattn::detail

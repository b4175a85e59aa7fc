// The dispatches of a KV cache's append (shaders/kv_append.comp): the new rows written at each
// sequence's length, cut so that no binding passes the device's limit and no grid its counts, then
// the lengths advanced.
#pragma once

#include "plan/program.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

class Runtime;

struct AppendTensors {
    DeviceTensor k_new, v_new;      // [B, Hkv, T, Dk], [B, Hkv, T, Dv]; one dtype
    DeviceTensor k_cache, v_cache;  // [B, Hkv, capacity, Dk], [B, Hkv, capacity, Dv]
    const vk::Buffer* lengths = nullptr;  // [B] int32, the whole buffer
    const vk::Buffer* counts = nullptr;   // [B] int32, the whole buffer (read when has_counts)
    bool has_counts = false;
};

// Appends the dispatches to `program`. Throws ResourceLimit when even one row of one head cannot
// be bound.
void record_append(Runtime& runtime, Program& program, const AppendTensors& tensors);

}  // namespace vkattn::detail

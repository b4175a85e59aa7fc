// Device tensors and KV caches from Python: vkattn::DeviceTensor behind vkattn.Tensor, and one KV
// cache class over vkattn::KvCache or vkattn::PagedKvCache behind vkattn.KVCache, so that a Python
// decode loop keeps its keys and values on the device (python/vkattn/_device.py).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nanobind/nanobind.h>

#include "attention_call.hpp"

namespace vkattn::python {

// A DeviceTensor with the Context it lives in (kept alive by the Python object that owns both).
struct Tensor {
    DeviceTensor tensor;
    Context* context = nullptr;
};

// The engine's dtype from a NumPy-style or vkattn name ("float32"/"f32", "float16"/"f16",
// "bfloat16"/"bf16", "q8_0", "fp8_e4m3", ...). InvalidArgument naming `argument` otherwise.
DType dtype_named(const std::string& name, const char* argument);

Tensor tensor_from_numpy(Context& context, const Input& array, const std::optional<std::string>& dtype);
Tensor tensor_empty(Context& context, const std::vector<std::int64_t>& shape, const std::string& dtype);
// The tensor's elements into `out` (its shape; float32, or float16 for an f16 tensor), blocking.
void tensor_to_numpy(const Tensor& tensor, const Output& out);

class Cache {
public:
    Cache(Context& context, std::int64_t batch, std::int64_t kv_heads, std::int64_t dim, std::int64_t dim_v,
          std::int64_t capacity, const std::string& dtype, bool paged, std::int64_t block_size);
    // New rows [B, Hkv, T, D] of f32/f16 tensors at each sequence's length; `counts` per sequence
    // (empty: T). One submission, waited on.
    void append(const Tensor& k, const Tensor& v, const std::vector<std::int32_t>& counts);
    // Attention of q [B, Hq, T, Dk] over the cache into o (and lse, [B, Hq, T, 1] f32, when given):
    // `call`'s options (its tensors unused). One submission, waited on; the report as a dict.
    nanobind::object attention(const Tensor& q, const Tensor& o, const std::optional<Tensor>& lse,
                               const AttentionCall& options);
    void reset(const std::vector<std::int32_t>& lengths);
    std::vector<std::int32_t> lengths() const;
    std::int64_t capacity() const;

private:
    Context* context_;
    std::variant<KvCache, PagedKvCache> cache_;
};

}  // namespace vkattn::python

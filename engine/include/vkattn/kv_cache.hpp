// A contiguous KV cache: K [B, Hkv, capacity, Dk] and V [B, Hkv, capacity, Dv] on the device, and a
// length per sequence, also on the device. append() writes new rows at each sequence's length with
// a shader and advances the lengths, all inside a Batch; attention reads the cache through its
// lengths (keys at or past a sequence's length are masked), usually with Causal::bottom_right so
// that the last new query sees every key. A decode step is then: append one token per sequence,
// attend, with no host copy of the cache:
//
//   KvCache cache(context, {.batch = 1, .kv_heads = 8, .capacity = 4096, .dim = 128});
//   AttentionPlan plan(context, cache.inputs(q), {o}, {.causal = Causal::bottom_right});
//   for (...) {
//       Batch batch(context);
//       cache.append(batch, k_new, v_new);  // [B, Hkv, 1, D] each
//       plan.run(batch, cache.inputs(q), {o});
//       batch.submit().wait();
//   }
//
// A KvCache is a handle: copies share the cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "vkattn/batch.hpp"
#include "vkattn/device_tensor.hpp"
#include "vkattn/plan.hpp"

namespace vkattn {

class Context;

namespace detail {
struct KvCacheState;
struct AppendRows;
}

struct KvCacheOptions {
    std::int64_t batch = 1;     // sequences, B
    std::int64_t kv_heads = 1;  // Hkv
    std::int64_t capacity = 0;  // rows per (sequence, head)
    std::int64_t dim = 0;       // Dk
    std::int64_t dim_v = 0;     // Dv; 0 = dim
    // The cache's storage: f32, f16, bf16, one of ggml's blocks (q8_0, q4_0, q4_1, q5_0, q5_1,
    // iq4_nl: dim and dim_v multiples of 32) or fp8 (fp8_e4m3, fp8_e5m2: dims even). New rows of any
    // float type are rounded or quantized on the device as vkattn::quantize_row does (ggml's
    // reference; fp8(x / scale) as vLLM's cache writes), bit for bit. All but f32 need
    // storageBuffer16BitAccess (the append stores 16-bit halves).
    DType dtype = DType::f32;
    std::optional<DType> dtype_v;  // V's own storage type; unset = dtype (resolved by the cache)
    // fp8 K / V: the scales, [1] or [kv_heads] (AttentionInputs::k_scale); empty = 1. inputs() hands
    // them to attention.
    std::vector<float> k_scale, v_scale;
};

class KvCache {
public:
    // Zeroed K and V (rows past a length are never NaN, so masked keys weigh exactly nothing) and
    // zero lengths; blocking. InvalidArgument naming the option for a bad size or dtype,
    // ResourceLimit when the device memory cannot hold it (a cache larger than one binding is fine:
    // appends and attention slice it).
    KvCache(Context& context, const KvCacheOptions& options);
    ~KvCache();
    KvCache(const KvCache&);
    KvCache& operator=(const KvCache&);

    const KvCacheOptions& options() const;
    const DeviceTensor& k() const;        // [B, Hkv, capacity, Dk], of dtype
    const DeviceTensor& v() const;        // [B, Hkv, capacity, Dv], of dtype_v
    const DeviceTensor& lengths() const;  // i32 [B, 1, 1, 1]

    // Records into `batch`: row t < count[b] of sequence b's new keys and values (every head) goes to
    // cache row length[b] + t, then length[b] += count[b]. k_new [B, Hkv, T, Dk] and v_new
    // [B, Hkv, T, Dv] are f32, f16 or bf16 (one dtype for both), any strides; counts[b] in [0, T] (empty:
    // T for every sequence). Throws InvalidArgument, recording nothing, for a bad tensor or when a
    // sequence would pass the capacity.
    void append(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                std::span<const std::int32_t> counts = {});
    // The same with the sequences' new rows packed (varlen, FlashAttention's layout): k_new
    // [1, Hkv, total, Dk] and v_new [1, Hkv, total, Dv] hold sequence b's rows at
    // [cu_seqlens[b], cu_seqlens[b + 1]) (B + 1 host offsets: 0 first, nondecreasing, total last;
    // uploaded in the batch). A batch of prompts of different lengths is one append.
    void append_packed(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                       std::span<const std::int32_t> cu_seqlens);
    // Records into `batch`: the lengths become `lengths` (each in [0, capacity]; empty: all 0). The
    // rows stay; a later append overwrites them.
    void reset(Batch& batch, std::span<const std::int32_t> lengths = {});

    // The lengths the appends and resets recorded so far leave, assuming their batches are
    // submitted in the order they were recorded (the device's lengths are the truth; an append
    // recorded into a batch that is then discarded still counts here until the next reset).
    std::vector<std::int32_t> recorded_lengths() const;

    // The attention inputs of queries `q` over the cache: {q, k(), v(), lengths()} and the fp8
    // scales (spans into the cache's options: valid while the cache lives).
    DeviceAttentionInputs inputs(const DeviceTensor& q) const;

private:
    void append_rows(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new, const detail::AppendRows& rows);
    std::shared_ptr<detail::KvCacheState> state_;
};

}  // namespace vkattn

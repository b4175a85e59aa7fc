// A paged KV cache, as vLLM and FlashAttention's flash_attn_with_kvcache keep one: K and V in pools
// of blocks [num_blocks, block_size, Hkv, D] shared by every sequence, a block table
// [B, max_blocks_per_seq] (int32) naming each sequence's blocks in key order, and a length per
// sequence, all on the device. Key n of sequence b is row n % block_size of block
// table[b][n / block_size]. Memory follows the tokens, not the longest sequence, and blocks can
// be moved, shared or freed by editing the table.
//
// append() writes each new row at its sequence's length through the table (the slot
// block · block_size + n % block_size, computed on the device from the table and the lengths),
// after giving a sequence free blocks when its rows pass its last one; attention reads the pools
// through the table directly (the fused and split paths; no gather). For the same data it gives
// the contiguous KvCache's outputs bit for bit. A decode step:
//
//   PagedKvCache cache(context, {.batch = 4, .kv_heads = 8, .num_blocks = 1024, .block_size = 16,
//                                .max_blocks_per_seq = 256, .dim = 128});
//   AttentionPlan plan(context, cache.inputs(q), {o}, {.causal = Causal::bottom_right});
//   for (...) {
//       Batch batch(context);
//       cache.append(batch, k_new, v_new);  // [B, Hkv, 1, D] each; takes a free block when one fills
//       plan.run(batch, cache.inputs(q), {o});
//       batch.submit().wait();
//   }
//
// Pools larger than one binding (maxStorageBufferRange, or the texel limit) are split into up to 4
// pool tensors of whole blocks, block ids running on from one to the next. A PagedKvCache is a
// handle: copies share the cache.
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
struct PagedKvCacheState;
struct AppendRows;
}

struct PagedKvCacheOptions {
    std::int64_t batch = 1;               // sequences, B
    std::int64_t kv_heads = 1;            // Hkv
    std::int64_t num_blocks = 0;          // blocks in the pools, shared by every sequence
    std::int64_t block_size = 16;         // keys per block, >= 1
    std::int64_t max_blocks_per_seq = 0;  // block-table entries per sequence; 0 = num_blocks
    std::int64_t dim = 0;                 // Dk
    std::int64_t dim_v = 0;               // Dv; 0 = dim
    DType dtype = DType::f32;             // as KvCacheOptions::dtype: any float, block or fp8 type
    std::optional<DType> dtype_v;         // V's pools' type; unset = dtype (resolved by the cache)
    std::vector<float> k_scale, v_scale;  // fp8: [1] or [kv_heads]; empty = 1 (as KvCacheOptions)
};

class PagedKvCache {
public:
    // Zeroed pools, a table naming no block (-1 everywhere), zero lengths; blocking.
    // InvalidArgument naming the option for a bad size or dtype; ResourceLimit when one block
    // passes a binding, the pools need more than 4 bindings, or the device memory cannot hold them.
    PagedKvCache(Context& context, const PagedKvCacheOptions& options);
    ~PagedKvCache();
    PagedKvCache(const PagedKvCache&);
    PagedKvCache& operator=(const PagedKvCache&);

    const PagedKvCacheOptions& options() const;  // max_blocks_per_seq and dim_v resolved
    const std::vector<DeviceTensor>& k_pools() const;  // [blocks, block_size, Hkv, Dk] each
    const std::vector<DeviceTensor>& v_pools() const;  // [blocks, block_size, Hkv, Dv] each
    const DeviceTensor& block_table() const;  // i32 [B, 1, 1, max_blocks_per_seq]
    const DeviceTensor& lengths() const;      // i32 [B, 1, 1, 1]
    std::int64_t capacity() const;            // keys per sequence at most: max_blocks_per_seq · block_size

    // Records into `batch`, as KvCache::append: row t < count[b] of sequence b's new keys and
    // values goes to key length[b] + t, then length[b] += count[b]. A sequence whose rows pass its
    // last block first gets free blocks (the lowest ids no table entry names), written into the
    // table in the same batch. Throws InvalidArgument, recording nothing, for a bad tensor, when a
    // sequence would pass capacity(), when the free blocks run out, or when a row would land in a
    // block that another table entry also names (shared blocks are read-only; copy one first).
    void append(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                std::span<const std::int32_t> counts = {});
    // The same with the sequences' new rows packed (varlen, FlashAttention's layout): k_new
    // [1, Hkv, total, Dk] and v_new [1, Hkv, total, Dv] hold sequence b's rows at
    // [cu_seqlens[b], cu_seqlens[b + 1]) (B + 1 host offsets: 0 first, nondecreasing, total last;
    // uploaded in the batch). A batch of prompts of different lengths is one append.
    void append_packed(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                       std::span<const std::int32_t> cu_seqlens);
    // Records into `batch`: the block table becomes `table` (B · max_blocks_per_seq entries, row
    // by row; each a block id in [0, num_blocks) or -1 for none). The blocks it names are taken,
    // the others free. Every key below a sequence's recorded length must have a block.
    void set_block_table(Batch& batch, std::span<const std::int32_t> table);
    // Records into `batch`: the lengths become `lengths` (each in [0, capacity()]; empty: all 0),
    // and the table entries past each new length are freed (set to -1).
    void reset(Batch& batch, std::span<const std::int32_t> lengths = {});

    // The host's record of what the recorded appends, tables and resets leave, assuming their
    // batches are submitted in the order they were recorded (the device's copies are the truth).
    std::vector<std::int32_t> recorded_lengths() const;
    std::vector<std::int32_t> recorded_block_table() const;
    std::int64_t free_blocks() const;

    // The attention inputs of queries `q` over the cache: q, the pools and table, lengths().
    DeviceAttentionInputs inputs(const DeviceTensor& q) const;

private:
    void append_rows(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new, const detail::AppendRows& rows);
    std::shared_ptr<detail::PagedKvCacheState> state_;
};

}  // namespace vkattn

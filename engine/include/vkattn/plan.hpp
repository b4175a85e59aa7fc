// Attention on device tensors, and plans: validate and build once, run many times.
//
// A plan is made from what a call looks like (dtypes, shapes, strides, which optional inputs and
// outputs, the per-head constants, the options), not from its data. Making it validates
// everything, chooses the path and builds every pipeline; a plan that cannot run throws then.
// Running it records the dispatches into a Batch. The descriptor sets and parameter blocks of a
// run are cached in the plan by the tensors' memory, so a loop that reuses its tensors (a decode
// step) writes nothing after its first run: recording is binds and dispatches.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn {

class Context;

namespace detail {
struct PlanState;
struct PlanAccess;  // the engine's way to a plan's state (not API)
}  // namespace detail

// Keys and values in a paged cache (vLLM's; flash_attn_with_kvcache's block_table): pools of
// blocks, K's [blocks, block_size, Hkv, Dk] and V's [blocks, block_size, Hkv, Dv], and a block
// table. Key n of sequence b is row n % block_size of block table[b][n / block_size]. The pools may
// be row-major (FlashAttention's layout) or any other order of the first three dimensions, without
// gaps, with D innermost, the same for every pool in rows of D (PagedKvCache keeps a block's rows
// head-major: Layout::bnhd). A pool larger than one binding is passed as several tensors of whole
// blocks (at most 4, each at an offset the device can bind), block ids running on from one to the
// next; every pool but the last holds the same number of blocks, and K's and V's pools pair up.
// Attention over it reads keys [0, kv_lengths[b]) (kv_lengths is required; Nkv is
// max_blocks · block_size), on the fused or split path; a table entry a visible key uses must name a
// block (entries outside [0, blocks) are clamped on the device, never read out of bounds).
struct DevicePagedKv {
    std::vector<DeviceTensor> k_pools, v_pools;
    DeviceTensor block_table;  // i32 [B, 1, 1, max_blocks], contiguous
    bool defined() const { return block_table.defined(); }
};

// Variable-length batches, as FlashAttention's flash_attn_varlen_func takes them: B sequences
// packed without padding. q and o are [1, Hq, total_q, D] (FlashAttention's [total_q, Hq, D] is
// that shape in Layout::bnhd), lse [1, Hq, total_q, 1]; sequence b's queries are rows
// [cu_seqlens_q[b], cu_seqlens_q[b + 1]). With cu_seqlens_k, k and v are packed the same way,
// [1, Hkv, total_k, D]; without it they are per sequence, [B, Hkv, Nkv, D], as a KV cache holds
// them (kv_lengths or a paged cache giving the lengths). cu_seqlens are i32 [B + 1] on the device,
// 0 first and nondecreasing (they cannot be checked on the host: each offset is clamped to the
// packed rows, never read or written past them); max_seqlen_q and max_seqlen_k bound every
// sequence's length (rows past max_seqlen_q are not computed). Causal::bottom_right aligns each
// sequence's last query with its last key (FlashAttention's causal); the window, softcap, ALiBi,
// sinks and dropout apply per sequence. Masks, the attention weights and the logits are not taken
// with it, and the three-stage path does not run it (fused and split do).
struct DeviceVarlen {
    DeviceTensor cu_seqlens_q;  // i32, B + 1 contiguous elements (any rank-4 shape)
    DeviceTensor cu_seqlens_k;  // i32, B + 1; empty: k and v are per sequence
    std::int64_t max_seqlen_q = 0;
    std::int64_t max_seqlen_k = 0;  // with cu_seqlens_k
    bool defined() const { return cu_seqlens_q.defined(); }
};

struct DeviceAttentionInputs {
    DeviceTensor q;  // [B, Hq, Nq, Dk]
    DeviceTensor k;  // [B, Hkv, Nkv, Dk]; empty when `paged` holds K and V
    DeviceTensor v;  // [B, Hkv, Nkv, Dv]
    // Optional: i32, B contiguous elements (any rank-4 shape), at an offset the device can bind
    // (minStorageBufferOffsetAlignment). Keys j >= len[b] are masked; values outside [0, Nkv] are
    // clamped on the device (they cannot be checked on the host).
    DeviceTensor kv_lengths;
    // Optional, contiguous, broadcastable to [B, Hq, Nq, Nkv]: u8 (non-zero = attend) and f32 (added).
    DeviceTensor bool_mask;
    DeviceTensor float_mask;
    // Per-head constants, part of the plan: a run must pass the values the plan was made with.
    std::span<const float> alibi_slopes;  // [Hq]
    std::span<const float> sinks;         // [Hq]
    std::span<const float> k_scale, v_scale;  // fp8 k / v: [1] or [Hkv] (AttentionInputs)
    DevicePagedKv paged;                  // instead of k and v
    DeviceVarlen varlen;                  // packed sequences of different lengths
};

struct DeviceAttentionOutputs {
    DeviceTensor o;        // [B, Hq, Nq, Dv], the dtype of q
    DeviceTensor weights;  // optional: f32, contiguous [B, Hq, Nq, Nkv]
    DeviceTensor lse;      // optional: f32, contiguous [B, Hq, Nq, 1] ([1, Hq, total_q, 1] varlen)
    DeviceTensor logits;   // optional: f32, contiguous [B, Hq, Nq, Nkv], at options.logits_stage
};

class AttentionPlan {
public:
    // For calls shaped like these tensors and options (their data is not read). Throws
    // InvalidArgument for a bad shape or option, ResourceLimit when no slicing fits the device.
    AttentionPlan(Context& context, const DeviceAttentionInputs& inputs, const DeviceAttentionOutputs& outputs,
                  const AttentionOptions& options = {});
    ~AttentionPlan();
    AttentionPlan(const AttentionPlan&);
    AttentionPlan& operator=(const AttentionPlan&);

    // Records attention over these tensors into the batch. Their dtypes, shapes and strides must be
    // the plan's (InvalidArgument naming the tensor otherwise); their memory may be any. The batch
    // keeps the tensors' memory alive until its submission completes. Tensors at offsets the plan
    // has not seen get their bindings planned then; a binding within a few hundred bytes of the
    // device's limit may be cut differently there than report() says (never refused: slicing
    // reaches single rows).
    void run(Batch& batch, const DeviceAttentionInputs& inputs, const DeviceAttentionOutputs& outputs) const;

    // The path, variant, slices and flops (flops count every key when the lengths are on the device).
    const AttentionReport& report() const;

    // How often runs found their tensors' bindings cached, and how many binding sets were built.
    struct Stats {
        std::uint64_t runs = 0;
        std::uint64_t bindings_built = 0;
    };
    Stats stats() const;

private:
    friend struct detail::PlanAccess;
    explicit AttentionPlan(std::shared_ptr<detail::PlanState> state);
    std::shared_ptr<detail::PlanState> state_;
};

// The gradients the backward pass writes on the device: each optional (dk and dv together), of its
// input's shape and dtype; d_sinks f32, Hq contiguous elements, and d_float_mask f32, the float
// mask's own shape, contiguous, each at a storage-buffer offset.
struct DeviceAttentionGradients {
    DeviceTensor dq, dk, dv;
    DeviceTensor d_sinks;
    DeviceTensor d_float_mask;
};

// Records the backward pass into the batch (docs/SEMANTICS.md, "The backward pass"): the gradients
// asked for, given the forward's o and lse for the same inputs and options (run the forward with
// DeviceAttentionOutputs::lse: f32, contiguous [B, Hq, Nq, 1]) and grad_out = dL/dO (o's shape and
// dtype; any strides with contiguous features). Dense k and v only (not paged, not varlen).
// Deterministic. Checks as the
// host call's (InvalidArgument naming the tensor, ResourceLimit past a binding); the report's
// gpu_ms is 0 (the batch's submission times it).
AttentionReport attention_backward(Batch& batch, const DeviceAttentionInputs& inputs, const DeviceTensor& o,
                                   const DeviceTensor& lse, const DeviceTensor& grad_out,
                                   const DeviceAttentionGradients& grads, const AttentionOptions& options = {});

// One call on device tensors: the context's cached plan for this call's shape, one submission,
// waited on. The report's gpu_ms is the attention's GPU time.
AttentionReport attention(Context& context, const DeviceAttentionInputs& inputs, const DeviceAttentionOutputs& outputs,
                          const AttentionOptions& options = {});

}  // namespace vkattn

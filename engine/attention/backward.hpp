// The backward pass on the device (docs/design/TRAINING.md): Δ = rowsum(dO ∘ o), then dQ
// (flash_bwd_q.comp) and dK/dV (flash_bwd_kv.comp) over chunks of whole (batch, K/V head) units,
// and the sinks' and the float mask's gradients over every unit at once.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attention/io.hpp"
#include "attention/tuning.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::detail {

class Program;
class Runtime;
struct BatchState;

// The forward's operands (q, k, v, o, lse, masks) and the backward's own.
struct BackwardOperands {
    Operands forward;
    Operand grad_out, dq, dk, dv;
    // Gradients whose kernels bind q, k, v, dO, lse and Δ whole (not by units): the sinks' reads
    // lse and Δ, the float mask's everything.
    bool d_sinks = false, d_float_mask = false;
};

// The forward's buffers (q, k, v, o, lse, key lengths, masks, per-head terms) and the backward's.
struct BackwardBuffers {
    DeviceBuffers forward;
    const vk::Buffer *grad_out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr, *d_sinks = nullptr;
    std::uint64_t d_sinks_offset = 0;  // bytes; the device's storage-offset alignment
    const vk::Buffer* d_float_mask = nullptr;  // f32, the mask's own shape, dense
    std::uint64_t d_float_mask_offset = 0;     // bytes, as d_sinks_offset
};

// The tensors' bindings for units [u0, u0 + units) (a unit is a batch and K/V head, b·Hkv + hk, with
// its group's query heads): what one chunk of the dispatches binds.
struct BackwardChunk {
    std::int64_t u0 = 0, units = 0;
    Slice q, k, v, o, lse, grad_out, delta, dq, dk, dv;
    MaskSlices masks;
};

// The path of dQ, dK and dV and its configuration: the fused kernels (flash_bwd_q, flash_bwd_kv)
// or three stages (bmm, bwd_scores, bmm).
struct BackwardChoice {
    Impl path = Impl::fused;  // fused or unfused
    BackwardConfig fused;
    UnfusedBackwardConfig unfused;
};

class BackwardRun {
public:
    // Plans the dispatches over chunks of whole units, as many per chunk as every binding allows;
    // refuses (ResourceLimit naming the tensor and the limit) what it cannot cut: one unit past a
    // binding, the sinks' or the mask's whole tensors past one, a sequence past the loop budget.
    BackwardRun(Runtime& runtime, const Problem& problem, const BackwardChoice& choice, const BackwardOperands& operands);

    // Records Δ, the sinks' gradient (when `d_sinks` is bound), the float mask's (when
    // `d_float_mask` is), dQ (when `dq` is) and dK/dV (when `dk` is; `dv` must be bound with it).
    void record(Program& program, const BackwardBuffers& buffers) const;

    AttentionReport report;

private:
    // The three-stage path's blocks (attention/unfused_backward.cpp): block_units_, block_rows_,
    // sums_kv_; refuses what its loops cannot take.
    void plan_unfused(const vk::DeviceCaps& caps, std::uint64_t binding_limit);
    // Its scratch: S and dP, and dK's and dV's fp32 sums (16 bytes when unused).
    std::uint64_t scores_bytes() const;
    std::uint64_t sum_bytes(std::int64_t features) const;
    // The three-stage dQ, dK, dV of one chunk (attention/unfused_backward.cpp).
    void record_unfused(Program& program, const BackwardBuffers& buffers, const BackwardChunk& chunk,
                        const vk::Buffer& delta, const vk::Buffer& scores, const vk::Buffer& grad_scores,
                        const vk::Buffer& dk_sum, const vk::Buffer& dv_sum) const;
    // The texel view an operand of type t is bound through (the storage buffer when words are read).
    TexelView view(DType t) const;

    Runtime& runtime_;
    const Problem& p_;
    BackwardChoice choice_;
    // The three-stage path: units and query rows per block of the score scratch (each of S and dP
    // holds block_units·block_rows rows of Nkv padded to 4 floats), and whether dK and dV sum
    // several blocks (or query heads) in fp32 scratch before their last one is stored.
    std::int64_t block_units_ = 0, block_rows_ = 0;
    bool sums_kv_ = false;
    std::vector<BackwardChunk> chunks_;
    std::optional<BackwardChunk> whole_;  // every unit at once: the mask's kernel (the sinks' reads lse and Δ only)
};

// The device memory a backward records of its own (Δ, fp32 [B, Hq, Nq]).
std::uint64_t backward_scratch_bytes(const Problem& problem);

// vkattn::attention_backward on device tensors (plan/device_backward.cpp): checks everything, then
// records the backward over the tensors into the batch, which keeps them alive. The host call
// records through it too.
AttentionReport record_backward(BatchState& batch, const DeviceAttentionInputs& inputs, const DeviceTensor& o,
                                const DeviceTensor& lse, const DeviceTensor& grad_out,
                                const DeviceAttentionGradients& grads, const AttentionOptions& options);

}  // namespace vkattn::detail

// The backward pass on the device (docs/design/TRAINING.md): Δ = rowsum(dO ∘ o), then dQ
// (flash_bwd_q.comp) and dK/dV (flash_bwd_kv.comp), and the sinks' gradient, over tensors each
// bound whole.
#pragma once

#include <cstdint>

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
};

// The forward's buffers (q, k, v, o, lse, key lengths, masks, per-head terms) and the backward's.
struct BackwardBuffers {
    DeviceBuffers forward;
    const vk::Buffer *grad_out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr, *d_sinks = nullptr;
    std::uint64_t d_sinks_offset = 0;  // bytes; the device's storage-offset alignment
    const vk::Buffer* d_float_mask = nullptr;  // f32, the mask's own shape, dense
    std::uint64_t d_float_mask_offset = 0;     // bytes, as d_sinks_offset
};

class BackwardRun {
public:
    // Plans the dispatches; refuses (ResourceLimit naming the tensor and the limit) what this step
    // cannot run: a tensor past one binding, a grid past the device's, a sequence past the loop budget.
    BackwardRun(Runtime& runtime, const Problem& problem, const BackwardConfig& config, const BackwardOperands& operands);

    std::uint64_t scratch_bytes() const;  // Δ
    // Records Δ, the sinks' gradient (when `d_sinks` is bound), the float mask's (when
    // `d_float_mask` is), dQ (when `dq` is) and dK/dV (when `dk` is; `dv` must be bound with it).
    void record(Program& program, const BackwardBuffers& buffers) const;

    AttentionReport report;

private:
    Runtime& runtime_;
    const Problem& p_;
    BackwardConfig config_;
    Slice q_, k_, v_, o_, grad_out_, lse_, delta_, dq_, dk_, dv_;
    MaskSlices masks_;
};

// vkattn::attention_backward on device tensors (plan/device_backward.cpp): checks everything, then
// records the backward over the tensors into the batch, which keeps them alive. The host call
// records through it too.
AttentionReport record_backward(BatchState& batch, const DeviceAttentionInputs& inputs, const DeviceTensor& o,
                                const DeviceTensor& lse, const DeviceTensor& grad_out,
                                const DeviceAttentionGradients& grads, const AttentionOptions& options);

}  // namespace vkattn::detail

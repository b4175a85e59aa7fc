// The device side of a host backward call (vkattn::attention_backward on host memory): the forward's
// inputs as the host call's temporaries (HostTensors), its o and lse on the device only, grad_out and
// the gradients in tensors of their own with the caller's strides. The host call records all of it
// in one submission; testing::time_attention_backward runs the upload (and the forward) once and
// then the backward alone, run after run.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "attention/problem.hpp"
#include "plan/host_tensors.hpp"
#include "vkattn/plan.hpp"

namespace vkattn {
class Context;
}

namespace vkattn::detail {

struct PlanState;

class HostBackward {
public:
    // Checks the call (as attention_backward's host entry point) and the device memory it needs;
    // allocates nothing.
    HostBackward(Context& context, const AttentionInputs& in, const TensorView& grad_out, const AttentionGradients& grads,
                 const AttentionOptions& options);
    HostBackward(const HostBackward&) = delete;  // the temporaries point into it
    HostBackward& operator=(const HostBackward&) = delete;
    // Allocates the device tensors, uploads the inputs and grad_out, and records the forward (o, lse).
    void upload(BatchState& state);
    // Records the backward over them; its report (gpu_ms 0: the submission times it).
    AttentionReport record(BatchState& state) const;
    // The gradients asked for back into the caller's views when the submission completes.
    void download(BatchState& state) const;
    std::uint64_t device_bytes() const;

private:
    Runtime* runtime_;
    const AttentionInputs* in_;
    const TensorView* grad_out_;
    const AttentionGradients* grads_;
    const AttentionOptions* options_;
    Problem problem_;
    Problem forward_problem_;  // the same request, with the lse the backward reads
    std::uint32_t unused_o_ = 0;
    float unused_lse_ = 0.0f;
    AttentionOutputs forward_;
    std::shared_ptr<const PlanState> plan_;
    std::unique_ptr<HostTensors> host_;
    std::array<std::int64_t, 4> dq_strides_{}, dk_strides_{}, dv_strides_{};
    bool want_kv_ = false;
    std::uint64_t backward_bytes_ = 0;
    DeviceAttentionInputs device_in_;
    DeviceAttentionOutputs device_out_;
    DeviceTensor d_o_;
    DeviceAttentionGradients device_grads_;
};

}  // namespace vkattn::detail

// The device side of a host call: a device tensor of its own for each host tensor (same strides,
// so the call's plan fits them), filled directly where the memory is mapped (zero-copy) or through
// the batch, and results copied back into the caller's views when the submission completes.
#pragma once

#include <cstdint>
#include <string>

#include "attention/problem.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::detail {

class Runtime;
struct BatchState;

class HostTensors {
public:
    // Sizes only: nothing is allocated until upload().
    HostTensors(Runtime& runtime, const Problem& problem, const AttentionInputs& inputs, const AttentionOutputs& outputs);
    // Device memory the temporaries take, and the same itemised for an error message.
    std::uint64_t bytes() const;
    std::string itemised() const;

    // Allocates the temporaries, fills the inputs, and points the device call's tensors at them.
    void upload(BatchState& batch, DeviceAttentionInputs& device_in, DeviceAttentionOutputs& device_out);
    // O (row by row through the caller's strides: gaps are never touched), lse, weights and logits back.
    void download(BatchState& batch, const DeviceAttentionOutputs& device_out);

private:
    Runtime* runtime_;
    const Problem* p_;
    const AttentionInputs* in_;
    const AttentionOutputs* out_;
    std::uint64_t q_, k_, v_, o_, masks_, lse_, weights_, logits_;
};

// A device tensor with its own memory and the host view's strides (base 0, the span allocated).
DeviceTensor own_tensor(Runtime& runtime, DType dtype, const std::array<std::int64_t, 4>& shape,
                        const std::array<std::int64_t, 4>& strides, const std::string& what);
// own_tensor of a dense [B, H, N, D] tensor.
DeviceTensor own_dense(Runtime& runtime, DType dtype, const std::array<std::int64_t, 4>& shape, const std::string& what);
// A mask's host data in a dense tensor of its own (its shape right-aligned to rank 4), filled.
DeviceTensor own_mask(Runtime& runtime, BatchState& batch, const MaskView& mask, DType dtype, const std::string& what);
// Host data (the tensor's span, gaps included) into the tensor: at once where its memory is
// mapped (a fresh tensor no submission uses yet), else as an upload in the batch.
void write_fresh(BatchState& batch, const DeviceTensor& tensor, const void* host);
// The tensor's elements into a host view when the submission completes: straight from mapped
// memory where it is mapped, else through a download in the batch.
void read_back(BatchState& batch, const DeviceTensor& tensor, const MutableTensorView& host);

}  // namespace vkattn::detail

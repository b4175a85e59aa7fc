// The device side of one request's tensors, shared by every path: inputs uploaded, outputs
// allocated (and poisoned when asked), masks and key lengths bound, results copied back.
#pragma once

#include <cstdint>

#include "attention/problem.hpp"
#include "attention/slicing.hpp"
#include "attention/transfers.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

// Bytes each tensor occupies (its span), known before anything is allocated so that planning can
// refuse a request early.
struct TensorBytes {
    std::uint64_t q, k, v, o, lse;
};
TensorBytes tensor_bytes(const Problem& problem, const AttentionInputs& inputs, const AttentionOutputs& outputs);

struct DeviceTensors {
    const vk::Buffer *q, *k, *v, *o, *lse, *lengths, *bool_mask, *float_mask;
    const vk::Buffer* head_terms;  // [Hq] ALiBi slopes then [Hq] sinks (mask.glsl)
    std::uint64_t head_terms_bytes;
    TensorBytes bytes;
};

constexpr std::uint32_t kNanF32 = 0x7fc00000u;
constexpr std::uint32_t kNanF16Pair = 0x7e007e00u;

// Key lengths, masks and per-head terms uploaded, and the lse buffer (an output when the caller
// asked for it, device scratch otherwise): everything a path binds besides q, k, v and o.
// tensors.bytes must already hold tensor_bytes() of the problem.
void upload_mask_terms(Transfers& transfers, const Problem& problem, DeviceTensors& tensors);

// q, k, v uploaded, o allocated (poisoned when asked), then upload_mask_terms.
DeviceTensors upload_tensors(Transfers& transfers, const Problem& problem, const AttentionInputs& inputs,
                             const AttentionOutputs& outputs);

// O row by row through its strides (gaps in the view are never touched), and lse when asked.
void copy_results(const Transfers& transfers, const DeviceTensors& tensors, const Problem& problem,
                  const AttentionOutputs& outputs);

// The slices of the masks a box of (b, h, query rows) covers, for the given keys (all of them
// when `keys` is empty), indexed by absolute key.
struct MaskSlices {
    Slice bool_mask, float_mask;
};
MaskSlices mask_slices(const Problem& problem, const Box& query_box, std::uint64_t alignment,
                       Features keys = {});

// The offset alignment every binding honours: storage, texel and vec4.
std::uint64_t binding_alignment(const vk::DeviceCaps& caps);

// A whole small buffer (key lengths, unused placeholders) as a slice.
Slice whole(std::uint64_t bytes);

}  // namespace vkattn::detail

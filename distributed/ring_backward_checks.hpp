// The ring backward's own checks of a call (beyond prepare's, ring_setup.hpp): o, lse, grad_out and the
// gradients of this rank, then the engine's checks of the first pair's backward.
#pragma once

#include <span>

#include "ring_setup.hpp"
#include "vkattn/attention.hpp"

namespace vkattn::distributed::detail {

// Throws InvalidArgument naming the first argument that this rank's backward cannot take: `first`
// is the first (query segment, key segment) pair's inputs, `block` its options.
void check_backward_call(const RingSetup& r, const AttentionInputs& first, const AttentionOptions& block,
                         const AttentionInputs& shard, const TensorView& o, std::span<const float> lse,
                         const TensorView& grad_out, const AttentionGradients& grads);

}  // namespace vkattn::distributed::detail

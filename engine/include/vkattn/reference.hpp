// The CPU reference: exactly the semantics of vkattn::attention, accumulated in double, stage by
// stage as the three-stage GPU path computes them. Slow by design; it is the ground truth.
#pragma once

#include <vector>

#include "vkattn/attention.hpp"

namespace vkattn {

// Same arguments, same validation and same outputs (o, weights, lse, logits) as vkattn::attention.
// options.impl and options.variant are ignored.
void reference_attention(const AttentionInputs& inputs, const AttentionOutputs& outputs,
                         const AttentionOptions& options = {});

// The backward pass on the CPU, accumulated in double: the gradients of a loss L with respect to the
// inputs, given grad_out = ∂L/∂o ([B, Hq, Nq, Dv], q's dtype; any strides with contiguous features:
// a broadcast gradient such as PyTorch's for out.sum() has stride 0 elsewhere). The forward is
// recomputed in double (scores, softmax, dropout's kept weights), so these are the exact gradients
// of the forward's definition, not of its rounded output. Every forward feature; varlen and device
// inputs are not taken. Validation as vkattn::attention's, plus grad_out's and the gradients'
// (InvalidArgument naming the argument; nothing is written then).
void reference_attention_backward(const AttentionInputs& inputs, const TensorView& grad_out,
                                  const AttentionGradients& grads, const AttentionOptions& options = {});

// The three stages, each on dense double arrays, for testing the GPU stages one at a time.
struct ReferenceStages {
    std::vector<double> scores;   // [B, Hq, Nq, Nkv]: scale·Q·Kᵀ, before softcap and any mask
    std::vector<double> weights;  // [B, Hq, Nq, Nkv]: masked softmax of scores (0 where masked), after dropout
    std::vector<double> lse;      // [B, Hq, Nq]: log(e^sink + Σ exp(logits)); -inf for empty rows
    std::vector<double> output;   // [B, Hq, Nq, Dv]: weights · V
};
ReferenceStages reference_stages(const AttentionInputs& inputs, const AttentionOptions& options = {},
                                 bool with_weights = true);

}  // namespace vkattn

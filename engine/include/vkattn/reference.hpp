// The CPU reference: exactly the semantics of vkattn::attention, accumulated in double, stage by
// stage as the three-stage GPU path computes them. Slow by design; it is the ground truth.
#pragma once

#include <vector>

#include "vkattn/attention.hpp"

namespace vkattn {

// Same arguments, same validation and same outputs (o, weights, lse) as vkattn::attention.
// options.impl and options.variant are ignored.
void reference_attention(const AttentionInputs& inputs, const AttentionOutputs& outputs,
                         const AttentionOptions& options = {});

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

// A PyTorch nn.MultiheadAttention state dict turned into the layer's config and weights: the shapes
// tell embed_dim, kdim, vdim, whether the input projection is packed and whether there are biases.
// Keys it does not know (bias_k / bias_v from add_bias_kv, a prefix from a bigger model) are
// refused with their names, rather than ignored.
#pragma once

#include <cstdint>
#include <vector>

#include "state_dict.hpp"
#include "vkattn/mha.hpp"

namespace vkattn {

struct MhaStateDict {
    MhaConfig config;
    MhaWeights weights;  // spans into `storage`
    std::vector<std::vector<float>> storage;
};

// Throws InvalidArgument naming the state dict's source and the key.
MhaStateDict mha_from_state_dict(const StateDict& dict, std::int64_t num_heads, bool batch_first);

}  // namespace vkattn

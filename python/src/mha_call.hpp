// The multi-head layer from Python: an nn.MultiheadAttention's config and parameters (NumPy arrays
// under their state_dict() names) and one call's inputs, run forward or backward by the engine's
// MultiHeadAttention (vkattn/mha.hpp). vkattn/torch.py's MultiheadAttention module is built on it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "attention_call.hpp"

namespace vkattn::python {

struct MhaCall {
    std::int64_t embed_dim = 0, num_heads = 0, kdim = 0, vdim = 0;
    bool bias = true, batch_first = false;
    std::map<std::string, Input> parameters;           // float32 C-contiguous, state_dict() names
    Input query;                                       // float32 C-contiguous, PyTorch's shapes
    std::optional<Input> key, value;                   // none: the query (self-attention)
    std::optional<Input> key_padding_mask, attn_mask;  // uint8 (non-zero = NOT allowed) or float32 (added)
    bool key_padding_mask_bool = false, attn_mask_bool = false;
    bool average_attn_weights = true;
    std::string impl = "auto";
    double dropout = 0.0;
    std::uint64_t seed = 0;
};

// out (the query's shape with embed_dim features) and, when given, attn_weights, written; the GIL
// released while the engine runs. Returns the report (gpu_ms, flops, the attention's path).
nanobind::object mha_forward(Context& context, const MhaCall& call, const Output& out,
                             const std::optional<Output>& attn_weights);

// The gradients for grad_out (out's shape): into d_query (and d_key, d_value where those are
// separate inputs) and into d_parameters, one array per state_dict() name, each of its parameter's size.
nanobind::object mha_backward(Context& context, const MhaCall& call, const Input& grad_out, const Output& d_query,
                              const std::optional<Output>& d_key, const std::optional<Output>& d_value,
                              const std::map<std::string, Output>& d_parameters);

}  // namespace vkattn::python

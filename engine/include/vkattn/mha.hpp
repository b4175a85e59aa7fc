// Multi-head attention as PyTorch's nn.MultiheadAttention computes it, end to end on the device:
//   q = query·W_qᵀ + b_q,  k = key·W_kᵀ + b_k,  v = value·W_vᵀ + b_v     (bmm.comp with a bias)
//   heads split by strides: head h reads columns h·hd .. h·hd + hd - 1 (hd = embed_dim / num_heads)
//   o_h = attention(q_h, k_h, v_h) with scale 1/sqrt(hd) and the masks  (any attention path)
//   heads merged by strides: o_h is written straight into its columns of o
//   out = o·W_oᵀ + b_o                                                   (bmm.comp with a bias)
// One submission; nothing but the inputs, the weights and the results crosses to the host.
//
// PyTorch's conventions, exactly: inputs [L, N, E] (or [N, L, E] with batch_first; [L, E] unbatched);
// key_padding_mask [N, S] and attn_mask [L, S] or [N·num_heads, L, S] (row n·num_heads + h), each
// bool with TRUE = NOT allowed, or float added to the scaled scores; weights [N, L, S] averaged over
// heads or [N, num_heads, L, S]. Note that vkattn::attention's bool masks are the inverse (true =
// attend); docs/SEMANTICS.md puts the two side by side. One difference: a query row whose every key
// is blocked gives zeros here (vkattn's rule), where PyTorch gives NaN.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vkattn/attention.hpp"

namespace vkattn {

class Context;

struct MhaConfig {
    std::int64_t embed_dim = 0;  // E, a multiple of num_heads
    std::int64_t num_heads = 0;
    std::int64_t kdim = 0;       // features of `key` (0: embed_dim)
    std::int64_t vdim = 0;       // features of `value` (0: embed_dim)
    bool bias = true;            // in_proj_bias and out_proj.bias
    bool batch_first = false;
};

// The weights under their state_dict() names: fp32, row-major [out, in] as nn.Linear stores them.
// With kdim = vdim = embed_dim PyTorch packs the input projections into in_proj_weight [3E, E]
// (rows q, k, v); otherwise it keeps q_proj_weight [E, E], k_proj_weight [E, kdim] and
// v_proj_weight [E, vdim]. Either form is accepted whenever its shapes fit.
struct MhaWeights {
    std::span<const float> in_proj_weight;   // [3E, E]
    std::span<const float> q_proj_weight;    // [E, E]
    std::span<const float> k_proj_weight;    // [E, kdim]
    std::span<const float> v_proj_weight;    // [E, vdim]
    std::span<const float> in_proj_bias;     // [3E], with bias
    std::span<const float> out_proj_weight;  // [E, E]
    std::span<const float> out_proj_bias;    // [E], with bias
};

// A dense, C-ordered fp32 host tensor.
struct HostArray {
    const float* data = nullptr;
    std::vector<std::int64_t> shape;
};

// A PyTorch mask: bool (uint8, non-zero = NOT allowed) or float (added), C-ordered.
struct TorchMask {
    const void* data = nullptr;
    bool is_bool = false;
    std::vector<std::int64_t> shape;
};

struct MhaInputs {
    HostArray query;  // [L, N, E]  ([N, L, E] batch_first; [L, E] unbatched)
    HostArray key;    // [S, N, kdim]; no data: the query (self-attention)
    HostArray value;  // [S, N, vdim]; no data: the key
    std::optional<TorchMask> key_padding_mask;  // [N, S] ([S] unbatched)
    std::optional<TorchMask> attn_mask;         // [L, S] or [N·num_heads, L, S]
};

struct MhaOutputs {
    float* out = nullptr;           // the query's layout with E features
    float* attn_weights = nullptr;  // optional (need_weights): [N, L, S] averaged, or [N, H, L, S]
};

struct MhaOptions {
    bool average_attn_weights = true;
    DType dtype = DType::f32;  // storage of activations and weights on the device: f32, f16 or bf16 (fp32 arithmetic)
    Impl impl = Impl::automatic;
    double dropout = 0.0;      // on the attention weights, as in training; Philox, reproducible
    std::uint64_t seed = 0;
};

struct MhaReport {
    AttentionReport attention;  // the core's path, variant and flops
    double gpu_ms = 0.0;        // the whole chain: projections, attention, output projection
    double flops = 0.0;         // the chain's: 2·rows·in·out per projection, plus the attention's
    std::uint64_t device_bytes = 0;
};

// The gradients of one forward pass (MultiHeadAttention::backward), fp32, named and shaped as PyTorch
// names and shapes them.
struct MhaGradients {
    // Of query, key and value, each in its input's layout. A tensor given as several inputs (key and
    // value left empty for self-attention, or the same pointer twice) collects the sum of its uses in
    // the first; the later ones stay empty, as PyTorch accumulates into the one tensor's .grad.
    std::vector<float> query, key, value;
    // One per parameter under its state_dict() key: in_proj_weight [3E, E] when kdim = vdim =
    // embed_dim (PyTorch's packed form), else q_proj_weight [E, E], k_proj_weight [E, kdim],
    // v_proj_weight [E, vdim]; in_proj_bias [3E] and out_proj.bias [E] with bias; out_proj.weight [E, E].
    struct Parameter {
        std::string name;
        std::vector<std::int64_t> shape;
        std::vector<float> values;
    };
    std::vector<Parameter> parameters;
    const Parameter* find(const std::string& name) const;  // null when the layer has no such parameter
    MhaReport report;  // the whole chain's GPU time; flops 3× the forward's (the backward's products)
};

class MultiHeadAttention {
public:
    // Checks every shape against the config (InvalidArgument naming the state_dict key) and keeps
    // a copy of the weights, split into q, k, v when packed.
    MultiHeadAttention(const MhaConfig& config, const MhaWeights& weights);

    // Throws InvalidArgument (naming query, key, value, key_padding_mask, attn_mask or dtype)
    // before any GPU work; ResourceLimit, VulkanError or DeviceLost otherwise.
    MhaReport forward(Context& context, const MhaInputs& inputs, const MhaOutputs& outputs,
                      const MhaOptions& options = {}) const;

    // The gradients of `grad_out` (dL/d out, the forward's output layout) with respect to the inputs
    // and every parameter: the forward recomputed (its o and log-sum-exp kept on the device), then the
    // output projection's, the attention's (vkattn::attention_backward, options.impl picks its path)
    // and the input projections' gradients, in one submission. Dropout regenerates the forward's
    // mask from options.seed. Errors as forward(), and grad_out named for its shape.
    MhaGradients backward(Context& context, const MhaInputs& inputs, const HostArray& grad_out,
                          const MhaOptions& options = {}) const;

    const MhaConfig& config() const { return config_; }
    // W_q, W_k, W_v ([E, E], [E, kdim], [E, vdim]), W_o [E, E]; biases [E] (empty without bias).
    const std::vector<float>& weight(int which) const { return w_[which]; }
    const std::vector<float>& bias(int which) const { return b_[which]; }
    enum Projection { q = 0, k = 1, v = 2, o = 3 };

private:
    MhaConfig config_;
    std::vector<float> w_[4], b_[4];
};

// The whole layer on the CPU in double (projections, vkattn's reference attention, the output
// projection): the ground truth for forward().
void reference_multi_head_attention(const MultiHeadAttention& layer, const MhaInputs& inputs,
                                    const MhaOutputs& outputs, const MhaOptions& options = {});
// backward() on the CPU in double (vkattn's reference attention backward for the core), with the
// device's storage rounding of inputs and weights for f16/bf16: the ground truth for backward().
MhaGradients reference_multi_head_attention_backward(const MultiHeadAttention& layer, const MhaInputs& inputs,
                                                     const HostArray& grad_out, const MhaOptions& options = {});

}  // namespace vkattn

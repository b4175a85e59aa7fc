// A multi-head attention call resolved: every shape checked against the layer's config, PyTorch's
// masks converted to vkattn's mask model, and the strides by which the attention core sees the
// projected tensors as [N, H, L, hd] heads. The GPU forward pass and the CPU reference both build
// their attention call from this, so they cannot disagree on what a request means.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/mha.hpp"

namespace vkattn::detail {

struct MhaProblem {
    std::int64_t L = 0, S = 0, N = 1;  // target length, source length, batch
    std::int64_t E = 0, kdim = 0, vdim = 0, H = 0, hd = 0;
    bool batched = true, batch_first = false;
    const float* query = nullptr;
    const float* key = nullptr;    // may equal query (self-attention: uploaded once)
    const float* value = nullptr;  // may equal key
    bool want_weights = false, average_weights = true;

    // Masks in vkattn's model (bool: non-zero = attend), with shapes broadcastable to [N, H, L, S].
    std::vector<std::uint8_t> attend;
    std::vector<std::int64_t> attend_shape;
    std::vector<float> additive;
    std::vector<std::int64_t> additive_shape;

    // The first of the inputs query (0), key (1), value (2) that input `i` is: the same data and the
    // same [rows, features] (self-attention's one tensor; a value that is the key). Such an input is
    // uploaded once and collects its uses' gradients. Data shared under another shape is another input.
    int same_as(int i) const;

    // Rows of a projected tensor: row r of the [rows, features] matrix holds (batch n, position t) at
    // r = t·N + n (sequence first) or n·T + t (batch first); the same order as the inputs.
    std::int64_t query_rows() const { return N * L; }
    std::int64_t key_rows() const { return N * S; }

    // [N, H, T, hd] head views of a [rows, E] projected matrix (T = L or S), on `data`.
    std::array<std::int64_t, 4> head_strides(std::int64_t T) const;
    TensorView heads(const void* data, DType dtype, std::int64_t T) const;
    MutableTensorView mutable_heads(void* data, DType dtype, std::int64_t T) const;

    // The core's inputs: q, k, v, o as head views of the given buffers' data, and the masks.
    AttentionInputs core_inputs(const void* q, const void* k, const void* v, DType dtype) const;
    AttentionOptions core_options(const MhaOptions& options) const;
};

// The strides of the [N, H, T, hd] head view of a [rows, E] projected matrix whose row r holds
// (batch n, position t) at r = t·N + n (sequence first) or n·T + t (batch first); head h takes the
// features h·hd .. h·hd + hd - 1.
std::array<std::int64_t, 4> mha_head_strides(bool batch_first, std::int64_t N, std::int64_t T, std::int64_t E,
                                             std::int64_t hd);

MhaProblem resolve_mha(const MhaConfig& config, const MhaInputs& inputs, const MhaOutputs& outputs,
                       const MhaOptions& options);

// grad_out of backward(): the forward's output shape (the query's with E features), with data.
void check_mha_grad_out(const MhaProblem& problem, const MhaInputs& inputs, const HostArray& grad_out);

// PyTorch's parameter gradients from the four projections' (Projection order; db empty without
// bias): in_proj_weight and in_proj_bias packed when kdim = vdim = embed_dim, state_dict() order.
std::vector<MhaGradients::Parameter> named_parameters(const MhaProblem& problem, bool bias, std::vector<float> (&dw)[4],
                                                      std::vector<float> (&db)[4]);

// Averages per-head weights [N, H, L, S] into [N, L, S], or copies them, into `dst`.
void store_mha_weights(const MhaProblem& problem, const std::vector<float>& per_head, float* dst);

}  // namespace vkattn::detail

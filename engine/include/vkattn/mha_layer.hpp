// nn.MultiheadAttention on device tensors: a layer's weights uploaded once into a Context, its
// forward pass recorded into a Batch, and incremental decoding over a KV cache, where each step
// projects only the new tokens, appends their keys and values to the cache, attends over the whole
// cache and projects the output:
//
//   vkattn::MhaLayer layer(context, module);                   // module: a vkattn::MultiHeadAttention
//   vkattn::KvCache cache(context, layer.cache_options(N, 4096));
//   for (...) {                                                // x, out: {1, T, N, E} device tensors
//       vkattn::Batch batch(context);
//       layer.decode(batch, cache, x, out);                    // T new tokens per sequence
//       batch.submit().wait();
//   }
//
// Activations are dense device tensors in the layer's dtype, shaped as PyTorch's with a leading 1:
// {1, L, N, E} for [L, N, E] (sequence first, the default) or {1, N, L, E} with batch_first.
// Unbatched [L, E] is {1, L, 1, E}. They must start at an offset the device can bind
// (minStorageBufferOffsetAlignment and minTexelBufferOffsetAlignment; DeviceTensor::empty's do).
#pragma once

#include <cstdint>
#include <memory>

#include "vkattn/attention.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/device_tensor.hpp"
#include "vkattn/kv_cache.hpp"
#include "vkattn/mha.hpp"
#include "vkattn/paged_kv_cache.hpp"

namespace vkattn {

class Context;

namespace detail {
struct MhaLayerState;
}

struct MhaLayerOptions {
    // A causal mask aligned top-left (PyTorch's is_causal: query i sees keys j <= i).
    bool causal = false;
    Impl impl = Impl::automatic;
};

// The layer's gradients on the device, all f32 and dense, overwritten by MhaLayer::backward: of the
// inputs, each shaped as its input ({1, d1, d2, features}), and of the parameters in
// MultiHeadAttention::Projection order (q, k, v, out): weight[i] {1, 1, E, in_i} (in_i = E, kdim,
// vdim, E) and bias[i] {1, 1, 1, E}. An input that is an earlier one's tensor (self-attention's
// key and value, or a value that is the key) gets no tensor of its own: leave it empty, and its
// gradient is summed into the earlier one's. Without bias the bias tensors stay empty.
struct MhaLayerGradients {
    DeviceTensor query, key, value;
    DeviceTensor weight[4], bias[4];
};

class MhaLayer {
public:
    // Uploads the layer's weights in `dtype` (biases stay f32), blocking. InvalidArgument naming
    // dtype where the device cannot store it.
    MhaLayer(Context& context, const MultiHeadAttention& layer, DType dtype = DType::f32);
    ~MhaLayer();
    MhaLayer(MhaLayer&&) noexcept;
    MhaLayer& operator=(MhaLayer&&) noexcept;

    const MhaConfig& config() const;
    DType dtype() const;

    // out = the layer over query, key and value (pass the query's tensor as key and value for
    // self-attention), with no mask or a causal one. The masks, dropout and the attention weights
    // of MultiHeadAttention::forward are the host API's. InvalidArgument names the tensor.
    void forward(Batch& batch, const DeviceTensor& query, const DeviceTensor& key, const DeviceTensor& value,
                 const DeviceTensor& out, const MhaLayerOptions& options = {}) const;

    // The gradients of grad_out (∂loss/∂out: out's shape and the layer's dtype) for the forward pass
    // over query, key and value with these options: the forward recorded again (its o and the
    // attention's log-sum-exp stay on the device), then every gradient of `grads` (the core's
    // backward by options.impl: fused or three stages). InvalidArgument names the tensor.
    void backward(Batch& batch, const DeviceTensor& query, const DeviceTensor& key, const DeviceTensor& value,
                  const DeviceTensor& grad_out, const MhaLayerGradients& grads, const MhaLayerOptions& options = {}) const;

    // One decoding step of self-attention: x holds T new tokens per sequence ({1, T, N, E}, or
    // {1, N, T, E} batch_first). Their keys and values are appended to the cache; query t of
    // sequence n attends to the cache's keys up to its own position (causal, bottom-right over
    // the cache's lengths), and out ({1, T, N, E}) gets the output projection. The cache holds the
    // projected keys and values: batch N, kv_heads num_heads, dim and dim_v embed_dim / num_heads,
    // the layer's dtype (cache_options()). InvalidArgument names x, out or cache.
    void decode(Batch& batch, KvCache& cache, const DeviceTensor& x, const DeviceTensor& out,
                Impl impl = Impl::automatic) const;
    void decode(Batch& batch, PagedKvCache& cache, const DeviceTensor& x, const DeviceTensor& out,
                Impl impl = Impl::automatic) const;

    // The cache this layer decodes with, for N sequences of up to `capacity` tokens.
    KvCacheOptions cache_options(std::int64_t batch, std::int64_t capacity) const;
    PagedKvCacheOptions paged_cache_options(std::int64_t batch, std::int64_t num_blocks, std::int64_t block_size = 16) const;

    // The device memory of the weights and biases.
    std::uint64_t weight_bytes() const;

private:
    std::shared_ptr<detail::MhaLayerState> state_;
};

}  // namespace vkattn

// What an MhaLayer holds: its config, its weights on the device, the scratch its projections write
// and the programs recorded over them; and the forward pass's recording, which the host API
// (MultiHeadAttention::forward) runs too, so the layer has one path.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "plan/program_cache.hpp"
#include "vkattn/mha.hpp"
#include "vkattn/plan.hpp"
#include "tensor/storage.hpp"

namespace vkattn {
class Context;
}

namespace vkattn::detail {

class Runtime;
struct BatchState;

struct MhaLayerState {
    // Checks the dtype against the device and uploads the weights (one submission, waited on).
    MhaLayerState(Context& context, const MultiHeadAttention& layer, DType dtype);

    Context* context;
    Runtime* runtime;
    MhaConfig config;  // kdim and vdim resolved
    DType dtype;
    std::int64_t head_dim;
    DeviceTensor w[4], b[4];  // MultiHeadAttention::Projection order; b[i] empty without bias
    std::uint64_t weight_bytes = 0;
    mutable ProgramCache programs{8};

    // [rows, E] matrices for the projected q, k, v and the core's output, at least these rows. Shared
    // by every run of the layer: each batch operation begins with a barrier over all earlier work
    // (earlier submissions included), so one run's use never overlaps another's. Grown on demand;
    // a run keeps the memory it used alive.
    struct Scratch {
        std::shared_ptr<Storage> q, k, v, o;
    };
    Scratch scratch(std::int64_t q_rows, std::int64_t kv_rows) const;

    // A [1, 1, rows, cols] view of a scratch matrix, and its [N, H, T, head_dim] head view.
    DeviceTensor rows(const std::shared_ptr<Storage>& storage, std::int64_t rows, std::int64_t cols) const;
    DeviceTensor heads(const std::shared_ptr<Storage>& storage, std::int64_t N, std::int64_t T) const;

private:
    mutable std::mutex scratch_mutex_;
    mutable Scratch scratch_;
    mutable std::int64_t q_rows_ = 0, kv_rows_ = 0;
};

// fp32 host values in `dtype`'s bytes (f16 rounded to nearest even).
std::vector<std::byte> in_dtype(const float* data, std::int64_t count, DType dtype);

// One forward pass over activations on the device.
struct MhaForward {
    DeviceTensor x_q, x_k, x_v, out;  // dense, rows in the activations' order: [L·N, E], [S·N, kdim], [S·N, vdim], [L·N, E]
    std::int64_t L = 0, S = 0, N = 1;
    DeviceTensor bool_mask, float_mask;  // the core's, optional (host API)
    DeviceTensor weights;                // the core's [N, H, L, S], optional (host API)
    AttentionOptions options;            // the core's
};

// Records the projections, the core over head views and the output projection into the batch, as
// one program (cached in the layer by the tensors' memory when `cache`); the batch's GPU time is
// narrowed to it when `timed`. Returns the core's report.
AttentionReport record_forward(BatchState& batch, const std::shared_ptr<const MhaLayerState>& layer,
                               const MhaForward& call, bool cache, bool timed);

// Whether two activations are one tensor: the same memory, offset and shape (an input given twice,
// as self-attention's). Data shared under another shape is another input.
inline bool same_tensor(const DeviceTensor& a, const DeviceTensor& b) {
    return TensorAccess::storage(a) == TensorAccess::storage(b) && a.offset_bytes() == b.offset_bytes() &&
           a.shape() == b.shape();
}

// One backward pass over activations on the device (mha/mha_backward.cpp).
struct MhaBackward {
    MhaForward forward;    // the inputs, masks and options (its out and weights unused)
    DeviceTensor grad_out; // [L·N, E], the layer's dtype
    // f32 [rows, features] of query, key and value; an input that is an earlier one (the same memory:
    // key or value the query, value the key) has none: its gradient is summed into that one's.
    DeviceTensor dx[3];
    DeviceTensor dw[4], db[4];  // f32 [out, in] and [out] in Projection order; db empty without bias
};

// Records the forward again (projections and the core, with its log-sum-exp), then the output
// projection's gradients, the core's backward (vkattn::attention_backward) and the input
// projections'. Returns the core backward's report.
AttentionReport record_backward(BatchState& batch, const std::shared_ptr<const MhaLayerState>& layer,
                                const MhaBackward& call);

}  // namespace vkattn::detail

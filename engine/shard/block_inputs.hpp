// One block of a whole attention call's host inputs: the views of q, k and v narrowed to the block's
// batches, heads and rows (no copy), the masks' parts copied C-contiguous (broadcast dimensions stay
// 1), and the per-batch and per-head constants narrowed, with AttentionOptions::block set so that
// the block computes exactly the whole's (docs/SEMANTICS.md, "Blocks"). Shared by head parallelism
// (engine/shard/head_parallel.cpp) and the sequence-parallel ring (the distributed target).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "attention/problem.hpp"
#include "vkattn/attention.hpp"

namespace vkattn::detail {

// [begin, begin + length) along one axis.
struct Extent {
    std::int64_t begin = 0, length = 0;
};

// A block of the whole: batches, K/V heads (their query heads follow by the group), query rows
// and keys.
struct BlockBox {
    Extent batches, kv_heads, queries, keys;
};

// A view narrowed to batches, heads and rows (no copy): host inputs and outputs alike.
template <class View>
View narrowed(const View& t, Extent b, Extent h, Extent n) {
    using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(t.data)>>, const std::uint8_t,
                                    std::uint8_t>;
    View v = t;
    const std::int64_t first = b.begin * t.strides[0] + h.begin * t.strides[1] + n.begin * t.strides[2];
    v.data = static_cast<Byte*>(t.data) + storage_bytes(t.dtype, first);
    v.shape = {b.length, h.length, n.length, t.shape[3]};
    return v;
}

// Calls `row(first, count)` for each row (along the keys) of the part `box` ([B, Hq, Nq, Nkv]
// extents) of a C-contiguous mask of `shape` broadcast to [B, Hq, Nq, Nkv]: `count` elements from
// the mask's element `first`, in the part's C order. Returns the part's shape, in the mask's rank (a
// broadcast dimension stays 1). Masks' parts are copied by it, and their gradients added back.
std::vector<std::int64_t> for_each_part_row(const std::vector<std::int64_t>& shape, const std::array<Extent, 4>& box,
                                            const std::function<void(std::int64_t first, std::int64_t count)>& row);

class BlockInputs {
public:
    // `whole` is resolved from `in` and `options` (the checks already passed).
    BlockInputs(const Problem& whole, const AttentionInputs& in, const AttentionOptions& options, const BlockBox& box);
    BlockInputs(const BlockInputs&) = delete;  // `inputs` points into this object's storage
    BlockInputs& operator=(const BlockInputs&) = delete;

    AttentionInputs inputs;
    AttentionOptions options;
    Extent heads;  // the block's query heads

private:
    std::vector<std::uint8_t> bool_mask_;
    std::vector<float> float_mask_, slopes_, sinks_, k_scale_, v_scale_;
    std::vector<std::int64_t> bool_shape_, float_shape_;
};

// The block of a whole output narrowed to a batch/head box: o by its strides (no copy); dense
// [B, Hq, Nq, ...] outputs (weights, lse, logits) only where the box is one contiguous run of rows:
// a single batch, or whole batches of every head (head_parallel cuts boxes so).
AttentionOutputs block_outputs(const Problem& whole, const AttentionOutputs& out, const BlockBox& box);

}  // namespace vkattn::detail

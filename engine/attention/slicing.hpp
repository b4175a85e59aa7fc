// Slicing: how a request is cut into chunks so that no binding exceeds maxStorageBufferRange (or
// the texel-buffer limit), and what range of which buffer each chunk binds.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "attention/params.hpp"

namespace vkattn::detail {

// An inclusive box of (batch, head, row) indices of a rank-4 tensor; the feature axis is whole.
struct Box {
    std::int64_t b0 = 0, b1 = 0, h0 = 0, h1 = 0, n0 = 0, n1 = 0;
};

// A binding: `range` bytes at byte `offset` of a buffer, and the descriptor that addresses the
// box's elements relative to that offset.
struct Slice {
    std::uint64_t offset = 0;
    std::uint64_t range = 0;
    TensorDesc desc;
};

// strides: element strides of (b, h, n, feature); row_length: elements along the feature axis.
// `alignment`: the device's binding offset alignment; `buffer_bytes`: the buffer's size.
Slice slice_of(const std::array<std::int64_t, 4>& strides, std::int64_t row_length, const Box& box,
               std::uint64_t element_bytes, std::uint64_t alignment, std::uint64_t buffer_bytes);

// A chunk of work: units [u0, u0 + units) (unit = b·Hq + h) and query rows [r0, r0 + rows).
// When units > 1 the chunk holds whole heads (r0 = 0, rows = Nq).
struct Chunk {
    std::int64_t u0 = 0, units = 1, r0 = 0, rows = 1;
};

// Cuts `units` × `rows` into chunks that `fits` accepts: as many whole units per chunk as fit
// (halving), else one unit cut into row blocks (multiples of `row_block` while that large, down to
// single rows). Returns an empty plan when even one row of one unit does not fit.
std::vector<Chunk> plan_chunks(std::int64_t units, std::int64_t rows, std::int64_t row_block,
                               const std::function<bool(const Chunk&)>& fits);

// The (b, h, row) box a chunk covers in a [B, Hq, Nq, ·] tensor, and in K/V ([B, Hkv, Nkv, ·]).
Box query_box(const Chunk& c, std::int64_t Hq);
Box kv_box(const Chunk& c, std::int64_t Hq, std::int64_t group, std::int64_t Nkv);

}  // namespace vkattn::detail

// Slicing: how a request is cut into chunks so that no binding exceeds maxStorageBufferRange (or
// the texel-buffer limit), and what range of which buffer each chunk binds.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "attention/params.hpp"
#include "vkattn/tensor.hpp"

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

// A range of the feature axis: [begin, begin + length). The key axis of masks and score rows is
// their feature axis, so key slices of those are feature ranges.
struct Features {
    std::int64_t begin = 0, length = 0;
};

// How the shader names what a slice holds.
enum class Indexing : std::uint8_t {
    // By the full tensor's (b, h, n) and feature index: the slice is invisible to the shader.
    absolute,
    // Rows from the box's first row n0 as row 0 (K or V of one key slice as a bmm operand, which
    // numbers its rows from 0).
    relative_rows,
    // Features from the range's begin as feature 0 (one key slice of the score rows as a bmm
    // operand or result).
    relative_features,
};

// How elements take bytes: `elements` consecutive elements (1, or a block of 32 for ggml's types)
// take `bytes` bytes. A plain number is the bytes of one element.
struct Unit {
    std::uint64_t bytes = 4, elements = 1;
    Unit(std::uint64_t element_bytes) : bytes(element_bytes) {}  // NOLINT: an element's bytes
    Unit(std::uint64_t block_bytes, std::uint64_t block_elements) : bytes(block_bytes), elements(block_elements) {}
};
Unit unit_of(DType dtype);

// strides: element strides of (b, h, n, feature); `features`: the part of each row bound.
// `alignment`: the device's binding offset alignment; `buffer_bytes`: the buffer's size. A block
// type's binding starts on a block (and the alignment), so element i of the binding is in its
// block i / 32, wherever the slice begins.
// `base`: the element index of (0, 0, 0, 0) in the buffer, for a buffer that holds only part of a
// tensor (a chunk's score scratch): may be negative, as long as the box lies in the buffer.
Slice slice_of(const std::array<std::int64_t, 4>& strides, Features features, const Box& box,
               Unit unit, std::uint64_t alignment, std::uint64_t buffer_bytes,
               Indexing indexing = Indexing::absolute, std::int64_t base = 0);
inline Slice slice_of(const std::array<std::int64_t, 4>& strides, std::int64_t row_length, const Box& box,
                      Unit unit, std::uint64_t alignment, std::uint64_t buffer_bytes) {
    return slice_of(strides, Features{0, row_length}, box, unit, alignment, buffer_bytes);
}

// Key slices: [0, total) cut into pieces of `length` (the last may be shorter).
std::vector<Features> key_slices(std::int64_t total, std::int64_t length);

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

// Host tensors as vkattn sees them: a pointer, an element type, a rank-4 shape and element strides.
// Attention tensors are always viewed as [batch, heads, sequence, feature]; the strides say how they
// lie in memory, so [B, H, N, D] and the interleaved [B, N, H, D] are the same tensor to the engine.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace vkattn {

// Storage types. Attention's q and o are f32, f16 or bf16; k and v any of the float types or one of
// ggml's quantized block formats or an 8-bit float (docs/SEMANTICS.md, "Storage types"); i32 holds
// key lengths and offsets, u8 boolean masks. Arithmetic is always fp32.
//   q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl: ggml's blocks of 32 consecutive features, bit for bit
//   (vkattn/quantize.hpp); a tensor of these types has D a multiple of 32 and every row starting on
//   a block, and its element strides count elements as for any other type.
//   fp8_e4m3 (OCP e4m3fn: no infinities, max 448), fp8_e5m2 (max 57344): one byte per element, each
//   tensor with a float scale per tensor or per head (vLLM's k_scale / v_scale): value = fp8 · scale.
enum class DType : std::uint8_t { f32, f16, i32, u8, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, fp8_e4m3, fp8_e5m2 };

// Consecutive features that share one block (1 for the scalar types) and the block's bytes.
std::size_t block_elements(DType dtype);
std::size_t block_bytes(DType dtype);
inline bool is_block_type(DType dtype) { return block_elements(dtype) > 1; }
inline bool is_fp8(DType dtype) { return dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2; }
// Bytes of one element of a scalar type; a block type has none (throws std::logic_error).
std::size_t size_of(DType dtype);
// Bytes that `elements` consecutive elements take (a multiple of block_elements for block types).
std::uint64_t storage_bytes(DType dtype, std::int64_t elements);
std::string to_string(DType dtype);
// The dtype named `name` ("f32", "bf16", "q4_0", ...); throws InvalidArgument naming `argument`.
DType dtype_from_string(const std::string& name, const char* argument);

// IEEE binary16 <-> binary32, round-to-nearest-even; fp16 host data is held as its bit pattern.
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);
// bfloat16 (the top half of a binary32) <-> binary32: round-to-nearest-even, a NaN stays a quiet NaN
// (ggml's and PyTorch's conversion). bf16 host data is held as its bit pattern.
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);

template <class Pointer>
struct BasicTensorView {
    Pointer data = nullptr;
    DType dtype = DType::f32;
    std::array<std::int64_t, 4> shape{};    // [B, H, N, D]
    std::array<std::int64_t, 4> strides{};  // in elements; strides[3] must be 1

    std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) const {
        return b * strides[0] + h * strides[1] + n * strides[2] + d * strides[3];
    }
    // One past the largest element offset the view touches (0 for an empty view).
    std::int64_t span() const {
        std::int64_t last = 0;
        for (int i = 0; i < 4; ++i) {
            if (shape[i] == 0) return 0;
            last += (shape[i] - 1) * strides[i];
        }
        return last + 1;
    }
};

using TensorView = BasicTensorView<const void*>;    // an input
using MutableTensorView = BasicTensorView<void*>;  // an output

enum class Layout : std::uint8_t {
    bhnd,  // [B, H, N, D]: each head's rows contiguous
    bnhd,  // [B, N, H, D]: heads interleaved, as projections produce them
};

std::string to_string(Layout layout);

// Strides of a dense tensor of logical shape [B, H, N, D] stored in the given layout.
std::array<std::int64_t, 4> dense_strides(Layout layout, const std::array<std::int64_t, 4>& shape);

template <class Pointer>
BasicTensorView<Pointer> make_view(Pointer data, DType dtype, Layout layout,
                                   const std::array<std::int64_t, 4>& shape) {
    return {data, dtype, shape, dense_strides(layout, shape)};
}

}  // namespace vkattn

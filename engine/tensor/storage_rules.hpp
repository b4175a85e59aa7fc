// Which dtypes may hold what, and how a block type's rows must lie: the one place these rules live
// (attention's resolve(), device tensors, the caches and the tool all ask here).
#pragma once

#include <array>
#include <cstdint>

#include "vkattn/tensor.hpp"

namespace vkattn::detail {

// Q, O and activations: the float types.
inline bool is_activation_type(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }
// K and V: a float type, a block type or an fp8 type (with its scales).
inline bool is_kv_type(DType t) { return is_activation_type(t) || is_block_type(t) || is_fp8(t); }
// Bytes of one texel of the float views the texel variants read (RGBA32F, RGBA16F); 0 for the types
// read only as 32-bit words and decoded (common/typed_load.glsl).
inline std::uint64_t texel_bytes(DType t) { return t == DType::f32 ? 16 : t == DType::f16 ? 8 : 0; }
inline bool is_word_type(DType t) { return texel_bytes(t) == 0; }

// The formats of the texel views kernels read: float vec4s (the view converts f16), or 32-bit words
// that common/typed_load.glsl decodes, of any storage type (the fused kernels' texel-words variant).
enum class TexelView : std::uint8_t { rgba32f, rgba16f, r32ui };
inline std::uint64_t view_bytes(TexelView v) { return v == TexelView::rgba32f ? 16 : v == TexelView::rgba16f ? 8 : 4; }
// The float view of an f32 or f16 tensor.
inline TexelView float_view(DType t) { return t == DType::f16 ? TexelView::rgba16f : TexelView::rgba32f; }

// A block type's tensor: D a multiple of the block (32) and every row starting on a block, so that
// element index i always lies in block i / 32 (strides[0..2] multiples of 32, strides[3] = 1).
// Throws InvalidArgument naming `name`; nothing to check for scalar types.
void check_block_rows(const char* name, DType dtype, const std::array<std::int64_t, 4>& shape,
                      const std::array<std::int64_t, 4>& strides);

}  // namespace vkattn::detail

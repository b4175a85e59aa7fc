// The storage types on the host: ggml's quantized blocks bit for bit, bf16, and reading any element
// of any type. These are the engine's own definition of what the device reads and writes: the
// kernels' loads, the device quantizer and the CPU reference all agree with them (tests compare the
// blocks with ones ggml itself wrote, tests/fixtures/ggml).
#pragma once

#include <cstdint>
#include <span>

#include "vkattn/tensor.hpp"

namespace vkattn {

// Bytes of one row of `features` elements (a multiple of block_elements for block types).
std::uint64_t row_bytes(DType dtype, std::int64_t features);

// Quantizes a row of floats into `dtype` as ggml's quantize_row_<type>_ref does (q8_0, q4_0, q4_1,
// q5_0, q5_1; iq4_nl as quantize_row_iq4_nl_ref: one least-squares refit, no importance weights),
// or rounds to f16/bf16 (nearest even), or copies f32. in.size() is the row's features (a multiple
// of 32 for block types), out.size() must be row_bytes(dtype, in.size()). Throws InvalidArgument
// naming "dtype" or the span.
void quantize_row(DType dtype, std::span<const float> in, std::span<std::uint8_t> out);

// The values a row of `dtype` stands for, exactly as ggml's dequantize_row_<type> computes them
// (fp32; every result is exact or one rounding of an exact product's sum, so the device agrees bit
// for bit). in.size() must be row_bytes(dtype, out.size()).
void dequantize_row(DType dtype, std::span<const std::uint8_t> in, std::span<float> out);

// Element `index` of tensor data of `dtype` that starts at `data`: index counts elements (for a
// block type, element index i lies in block i / 32 at byte (i / 32)·block_bytes).
float load_element(const void* data, DType dtype, std::int64_t index);

// ggml's non-linear 4-bit values of iq4_nl (kvalues_iq4nl).
inline constexpr std::int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace vkattn

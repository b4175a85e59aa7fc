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
// or rounds to f16/bf16 (nearest even), or copies f32, or encodes fp8(x / scale) (float_to_fp8;
// `scale` is the fp8 tensor's, and must be 1 for every other type). in.size() is the row's features
// (a multiple of 32 for block types), out.size() must be row_bytes(dtype, in.size()). Throws
// InvalidArgument naming "dtype", "scale" or the span.
void quantize_row(DType dtype, std::span<const float> in, std::span<std::uint8_t> out, float scale = 1.0f);

// The values a row of `dtype` stands for, exactly as ggml's dequantize_row_<type> computes them
// (fp32; every result is exact or one rounding of an exact product's sum, so the device agrees bit
// for bit); an fp8 row's values are fp8_to_float(bits) · scale, one rounding. in.size() must be
// row_bytes(dtype, out.size()).
void dequantize_row(DType dtype, std::span<const std::uint8_t> in, std::span<float> out, float scale = 1.0f);

// Element `index` of tensor data of `dtype` that starts at `data`: index counts elements (for a
// block type, element index i lies in block i / 32 at byte (i / 32)·block_bytes). An fp8 element is
// its unscaled value (the caller multiplies by its tensor's scale).
float load_element(const void* data, DType dtype, std::int64_t index);

// The 8-bit floats (OCP FP8, as vLLM and PyTorch's float8_e4m3fn / float8_e5m2 define them):
//   fp8_e4m3: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN,
//             the largest value 448, subnormals m·2^-9.
//   fp8_e5m2: 1 sign, 5 exponent bits (bias 15), 2 mantissa bits: the top byte of an IEEE binary16,
//             with infinities and NaNs; the largest finite value 57344, subnormals m·2^-16.
// Encoding rounds to nearest, ties to even, and saturates as vLLM's cache writes do: a magnitude
// beyond the largest finite value (infinities included) becomes ±max; a NaN stays a NaN.
std::uint8_t float_to_fp8(DType dtype, float value);
float fp8_to_float(DType dtype, std::uint8_t bits);
// The largest finite value of an fp8 type (448, 57344).
float fp8_max(DType dtype);

// ggml's non-linear 4-bit values of iq4_nl (kvalues_iq4nl).
inline constexpr std::int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace vkattn

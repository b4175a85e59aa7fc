// Element access for the CPU reference: any storage type read as double (or K and V whole, as dense
// fp32 rows), f32/f16/bf16 written from double (one rounding, as a store on the device).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "vkattn/quantize.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::detail {

// A row's maximum before any key is seen (and after none was visible).
inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

inline double load(const TensorView& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) {
    return load_element(t.data, t.dtype, t.offset(b, h, n, d));
}

// K or V as dense fp32 [B, H, N, D], converted once per call: the reference reads every element Nq
// times, and reads through the view's strides and storage type (a block element decoding its whole
// block) took three quarters of the GPU tests' time on lavapipe, more than the kernels they check.
// The values are the kernels': f32, f16 and bf16 exactly; an fp8 element times its head's scale
// (`scales`, [H]) in one fp32 rounding, as the kernels take it; a block type's dequantized values.
struct DenseRows {
    std::vector<float> values;
    std::int64_t H = 0, N = 0, D = 0;
    const float* row(std::int64_t b, std::int64_t h, std::int64_t n) const {
        return values.data() + ((b * H + h) * N + n) * D;
    }
};

inline DenseRows dense_rows(const TensorView& t, const std::vector<float>& scales) {
    const auto [B, H, N, D] = t.shape;
    DenseRows dense;
    dense.H = H;
    dense.N = N;
    dense.D = D;
    dense.values.resize(static_cast<std::size_t>(B * H * N * D));
    const bool decoded = is_block_type(t.dtype) || is_fp8(t.dtype);
    const std::uint64_t bytes = decoded ? row_bytes(t.dtype, D) : 0;
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t n = 0; n < N; ++n) {
                float* out = dense.values.data() + ((b * H + h) * N + n) * D;
                if (decoded) {
                    const auto* row = static_cast<const std::uint8_t*>(t.data) + storage_bytes(t.dtype, t.offset(b, h, n, 0));
                    dequantize_row(t.dtype, {row, bytes}, {out, static_cast<std::size_t>(D)},
                                   scales.empty() ? 1.0f : scales[static_cast<std::size_t>(h)]);
                } else {
                    for (std::int64_t d = 0; d < D; ++d) out[d] = load_element(t.data, t.dtype, t.offset(b, h, n, d));
                }
            }
    return dense;
}

inline void store(const MutableTensorView& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d,
                  double value) {
    const std::int64_t at = t.offset(b, h, n, d);
    const auto f = static_cast<float>(value);
    if (t.dtype == DType::f16)
        static_cast<std::uint16_t*>(t.data)[at] = float_to_half(f);
    else if (t.dtype == DType::bf16)
        static_cast<std::uint16_t*>(t.data)[at] = float_to_bf16(f);
    else
        static_cast<float*>(t.data)[at] = f;
}

}  // namespace vkattn::detail

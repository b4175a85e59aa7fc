// What a kernel with 16-bit products multiplied (AttentionReport::product_type: the cooperative-matrix
// kernels round q, k and v to f16, or to bf16 for bf16 storage, as they stage them), so that the CPU
// reference reads the same values and the comparison measures the kernel, not the rounding the
// caller asked for.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "vkattn/attention.hpp"
#include "vkattn/quantize.hpp"
#include "vkattn/testing/random.hpp"

namespace vkattn::testing {

// x rounded to `type` (f16 or bf16, nearest even, as the kernels round their operands).
inline float round_to(DType type, float x) {
    return type == DType::bf16 ? bf16_to_float(float_to_bf16(x)) : half_to_float(float_to_half(x));
}

// q, k and v as fp32 tensors of their values (dequantized; fp8 times its scale) rounded to the
// product type, dense in bhnd; `inputs` is the caller's with those three (and no fp8 scales) in their
// place.
struct RoundedOperands {
    HostTensor q, k, v;
    AttentionInputs inputs;
};

inline HostTensor rounded(DType type, const TensorView& view, std::span<const float> scales) {
    HostTensor t;
    t.shape = view.shape;
    t.f32.resize(static_cast<std::size_t>(t.count()));
    std::size_t at = 0;
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h) {
            const float scale = scales.empty() ? 1.0f : scales[scales.size() == 1 ? 0 : static_cast<std::size_t>(h)];
            for (std::int64_t n = 0; n < t.shape[2]; ++n)
                for (std::int64_t d = 0; d < t.shape[3]; ++d)
                    t.f32[at++] = round_to(type, load_element(view.data, view.dtype, view.offset(b, h, n, d)) * scale);
        }
    return t;
}

inline RoundedOperands rounded_operands(const AttentionInputs& in, DType type) {
    RoundedOperands out;
    out.q = rounded(type, in.q, {});
    out.k = rounded(type, in.k, is_fp8(in.k.dtype) ? in.k_scale : std::span<const float>{});
    out.v = rounded(type, in.v, is_fp8(in.v.dtype) ? in.v_scale : std::span<const float>{});
    out.inputs = in;
    out.inputs.q = out.q.view();
    out.inputs.k = out.k.view();
    out.inputs.v = out.v.view();
    out.inputs.k_scale = {};
    out.inputs.v_scale = {};
    return out;
}

// The backward's (q, k, v and dO), where q, k and v are all f32: the reference's gradients take their
// inputs' types, so only all-f32 inputs are replaced (f16 or bf16 ones are already what such a kernel
// multiplies). Empty otherwise: mixed types stay as stored, so an f32 tensor beside bf16 ones reaches
// the reference unrounded while the kernel multiplies it as bf16 (2⁻⁹), which the gradients'
// tolerance must then absorb; no test mixes them.
struct RoundedBackwardOperands {
    RoundedOperands forward;
    HostTensor grad_out;
};
inline std::optional<RoundedBackwardOperands> rounded_backward_operands(const AttentionInputs& in, const TensorView& grad_out,
                                                                        DType type) {
    if (in.q.dtype != DType::f32 || in.k.dtype != DType::f32 || in.v.dtype != DType::f32) return std::nullopt;
    return RoundedBackwardOperands{rounded_operands(in, type), rounded(type, grad_out, {})};
}

}  // namespace vkattn::testing

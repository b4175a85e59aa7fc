// What a kernel with f16 products multiplied (AttentionReport::f16_products: the cooperative-matrix
// kernel rounds q, k and v to f16 as it stages them), so that the CPU reference reads the same
// values and the comparison measures the kernel, not the rounding the caller asked for.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "vkattn/attention.hpp"
#include "vkattn/quantize.hpp"
#include "vkattn/testing/random.hpp"

namespace vkattn::testing {

// q, k and v as fp32 tensors of their values (dequantized; fp8 times its scale) rounded to f16,
// dense in bhnd; `inputs` is the caller's with those three (and no fp8 scales) in their place.
struct F16Operands {
    HostTensor q, k, v;
    AttentionInputs inputs;
};

inline HostTensor f16_rounded(const TensorView& view, std::span<const float> scales) {
    HostTensor t;
    t.shape = view.shape;
    t.f32.resize(static_cast<std::size_t>(t.count()));
    std::size_t at = 0;
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h) {
            const float scale = scales.empty() ? 1.0f : scales[scales.size() == 1 ? 0 : static_cast<std::size_t>(h)];
            for (std::int64_t n = 0; n < t.shape[2]; ++n)
                for (std::int64_t d = 0; d < t.shape[3]; ++d)
                    t.f32[at++] = half_to_float(float_to_half(load_element(view.data, view.dtype, view.offset(b, h, n, d)) * scale));
        }
    return t;
}

inline F16Operands f16_operands(const AttentionInputs& in) {
    F16Operands out;
    out.q = f16_rounded(in.q, {});
    out.k = f16_rounded(in.k, is_fp8(in.k.dtype) ? in.k_scale : std::span<const float>{});
    out.v = f16_rounded(in.v, is_fp8(in.v.dtype) ? in.v_scale : std::span<const float>{});
    out.inputs = in;
    out.inputs.q = out.q.view();
    out.inputs.k = out.k.view();
    out.inputs.v = out.v.view();
    out.inputs.k_scale = {};
    out.inputs.v_scale = {};
    return out;
}

// The backward's (q, k, v and dO), where q, k and v are all f32: the reference's gradients take their
// inputs' types, so only all-f32 inputs are replaced (f16 ones are already what such a kernel
// multiplies; mixed types stay as stored). Empty otherwise.
struct F16BackwardOperands {
    F16Operands forward;
    HostTensor grad_out;
};
inline std::optional<F16BackwardOperands> f16_backward_operands(const AttentionInputs& in, const TensorView& grad_out) {
    if (in.q.dtype != DType::f32 || in.k.dtype != DType::f32 || in.v.dtype != DType::f32) return std::nullopt;
    return F16BackwardOperands{f16_operands(in), f16_rounded(grad_out, {})};
}

}  // namespace vkattn::testing

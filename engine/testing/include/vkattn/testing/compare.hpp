// The one tolerance rule, used by the tests, `vk-attn bench --validate` and `vk-attn check`:
//   relative:    ‖gpu − ref‖₂ ≤ rel · ‖ref‖₂ + floor · √n
//   per element: |gpu − ref| ≤ abs · max|ref| + floor   (so no average can hide one bad element)
// −∞ must match −∞ exactly (masked log-sum-exp); a NaN matches only a NaN in the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "vkattn/tensor.hpp"

namespace vkattn::testing {

struct Tolerance {
    double rel;
    double abs;
    double floor = 0.0;  // an absolute error always allowed per element (the storage's finest step)
};

// fp32 storage: ~1e-6 is typical for D ≤ 512 dot products; fp16 storage: the output's own rounding
// (2⁻¹¹ ≈ 4.9e-4) dominates, and below fp16's smallest normal (6.1e-5) its subnormals are spaced
// 2⁻²⁴ ≈ 6e-8 apart, so outputs that small (a sink or ALiBi can make them so) carry that much error
// whatever their size. bf16 storage: its rounding (2⁻⁹ ≈ 2e-3 of each value at most, about 1.1e-3
// in the norm) dominates; it has fp32's exponents, so no floor. Quantized K/V are checked against the
// reference on their dequantized values, with the output's dtype's tolerance: dequantization is exact.
inline Tolerance tolerance_for(DType dtype) {
    if (dtype == DType::f16) return Tolerance{3e-3, 4e-3, 1.2e-7};
    if (dtype == DType::bf16) return Tolerance{4e-3, 4e-3};
    return Tolerance{1e-5, 1e-4};
}

// An output row that sums `keys` products in fp32: its rounding grows as a random walk of 2⁻²⁴ per
// addition, √keys · 2⁻²⁴ relative, which passes fp32's 1e-5 beyond about 28,000 keys (600,000
// keys gave 1.08e-5 on an H200). 16-bit storage's own rounding stays far above it.
inline Tolerance tolerance_for(DType dtype, std::int64_t keys) {
    Tolerance t = tolerance_for(dtype);
    const double walk = std::ldexp(1.0, -24) * std::sqrt(static_cast<double>(std::max<std::int64_t>(keys, 1)));
    t.rel = std::max(t.rel, walk);
    t.abs = std::max(t.abs, 10 * walk);
    return t;
}

// A kernel whose products round their operands to f16 or bf16 (AttentionReport::product_type) is
// compared with the reference on those rounded operands (testing/rounded_operands.hpp); its
// probabilities are rounded too, so its output has that type's tolerance at least, whatever the
// storage. bf16's per element is twice its storage's: the probabilities' rounding (2⁻⁹ of each)
// adds up to another 2⁻⁹ of the largest value to the output's own (an fp8 K/V's case met 4.3e-3 of
// it); f16's rounding of them is 4 times finer, inside its storage's tolerance.
inline Tolerance tolerance_for(DType dtype, std::int64_t keys, DType product_type) {
    Tolerance t = tolerance_for(dtype, keys);
    if (product_type == DType::f32) return t;
    Tolerance h = tolerance_for(product_type, keys);
    if (product_type == DType::bf16) h.abs = 2 * h.abs;
    return Tolerance{std::max(t.rel, h.rel), std::max(t.abs, h.abs), std::max(t.floor, h.floor)};
}

// fp32 scores of size S carry a rounding of about 2⁻²⁴·S whatever the kernel (the dot product's
// sums, then the scale), and the softmax turns it into as much relative error in o where scores
// nearly tie; the reference, in double, has none. `score_bound` bounds |scale·q·k|
// (|scale|·Dk·max|q|·max|k|). Ordinary inputs (bounds ≲ 10) keep the dtype's tolerance; scores
// near 10⁴ get ~10⁻², still far below a masking or softmax fault's O(1). (An H200 ran the tile
// kernel at 9.5e-5 on scores of 10⁴ where flash.comp's summation order happened to pass 1e-5.)
inline double score_rounding(double score_bound) { return 4 * std::ldexp(1.0, -24) * score_bound; }
inline Tolerance with_score_rounding(Tolerance t, double score_bound) {
    const double rounding = score_rounding(score_bound);
    t.rel = std::max(t.rel, rounding);
    t.abs = std::max(t.abs, rounding);
    return t;
}

// Gradients (the backward pass) of inputs stored in `dtype`, and the sinks' gradient of such a call:
// in fp32 the sums over the keys (dQ) or queries (dK, dV) of products with (dP − Δ), which cancels,
// are a few times less exact than o's. In 16-bit storage Δ = rowsum(dO ∘ o) is computed from the
// forward's stored o (as FlashAttention-2 does), so a gradient carries o's rounding and then its own:
// up to 2 ulps per element in bf16 (2⁻⁸ of the largest), where one is allowed for o.
inline Tolerance gradient_tolerance_for(DType dtype) {
    if (dtype == DType::f32) return Tolerance{5e-5, 5e-4};
    if (dtype == DType::bf16) return Tolerance{4e-3, 8e-3};
    return tolerance_for(dtype);
}
// Gradients from products of f16 or bf16 operands (AttentionReport::product_type), checked on the
// rounded inputs: the probabilities and dS are rounded too, and Δ comes from a forward of the same
// kind, so that type's gradient tolerance at least, whatever the storage.
inline Tolerance gradient_tolerance_for(DType dtype, DType product_type) {
    Tolerance t = gradient_tolerance_for(dtype);
    if (product_type == DType::f32) return t;
    const Tolerance h = gradient_tolerance_for(product_type);
    return Tolerance{std::max(t.rel, h.rel), std::max(t.abs, h.abs), std::max(t.floor, h.floor)};
}

struct Comparison {
    bool ok = true;
    double relative_error = 0.0;  // ‖gpu − ref‖₂ / ‖ref‖₂ over the finite reference elements
    std::string message;  // the first failing index and both values, and the norms
};

inline Comparison compare(const std::vector<double>& gpu, const std::vector<double>& ref, Tolerance tol) {
    Comparison c;
    double diff2 = 0, ref2 = 0, max_ref = 0;
    for (std::size_t i = 0; i < ref.size(); ++i)
        if (std::isfinite(ref[i])) max_ref = std::max(max_ref, std::fabs(ref[i]));
    std::ostringstream msg;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double a = gpu[i], b = ref[i];
        bool bad;
        if (std::isnan(b)) bad = !std::isnan(a);
        else if (std::isinf(b)) bad = a != b;
        else {
            bad = !std::isfinite(a) || std::fabs(a - b) > tol.abs * std::max(max_ref, 1e-30) + tol.floor;
            if (std::isfinite(a)) {
                diff2 += (a - b) * (a - b);
                ref2 += b * b;
            }
        }
        if (bad && c.ok) {
            c.ok = false;
            msg << "element " << i << ": gpu " << a << " vs reference " << b << "; ";
        }
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    c.relative_error = rel;
    std::size_t finite = 0;
    for (const double b : ref) finite += std::isfinite(b) ? 1 : 0;
    if (std::sqrt(diff2) > tol.rel * std::sqrt(ref2) + tol.floor * std::sqrt(static_cast<double>(finite))) {
        c.ok = false;
        msg << "relative error " << rel << " > " << tol.rel << "; ";
    }
    msg << "max|ref| " << max_ref << ", relative error " << rel;
    c.message = msg.str();
    return c;
}

// The log-sum-exp is a logarithm: its absolute error is the relative error of the softmax's sum,
// so it is judged absolutely, |gpu − ref| ≤ 1e-5 · max(1, |ref|) per element (a relative rule
// would demand 1e-12 of an lse near 0). It is in the scores' units, so it carries their absolute
// rounding too: `score_error`, score_rounding of their bound where a case knows it (an H200's matrix
// units ran 2.5e-5 at scores bounded by 6,400, session 26). −∞ must match exactly, NaN only NaN.
inline Comparison compare_lse(const std::vector<double>& gpu, const std::vector<double>& ref, double score_error = 0.0) {
    constexpr double kTol = 1e-5;
    Comparison c;
    std::ostringstream msg;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double a = gpu[i], b = ref[i];
        const bool bad = std::isnan(b) ? !std::isnan(a)
                         : std::isinf(b) ? a != b
                                         : !(std::fabs(a - b) <= kTol * std::max(1.0, std::fabs(b)) + score_error);
        if (std::isfinite(a) && std::isfinite(b)) c.relative_error = std::max(c.relative_error, std::fabs(a - b) / std::max(1.0, std::fabs(b)));
        if (bad && c.ok) {
            c.ok = false;
            msg << "element " << i << ": gpu " << a << " vs reference " << b << " (tolerance " << kTol << " · max(1, |ref|) + "
                << score_error << "); ";
        }
    }
    msg << "largest error " << c.relative_error;
    c.message = msg.str();
    return c;
}

}  // namespace vkattn::testing

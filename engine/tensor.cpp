#include "vkattn/tensor.hpp"

#include <bit>

#include "vkattn/attention.hpp"

namespace vkattn {

std::size_t size_of(DType dtype) {
    switch (dtype) {
        case DType::f32: return 4;
        case DType::f16: return 2;
        case DType::i32: return 4;
        case DType::u8: return 1;
    }
    return 0;
}

std::string to_string(DType dtype) {
    switch (dtype) {
        case DType::f32: return "f32";
        case DType::f16: return "f16";
        case DType::i32: return "i32";
        case DType::u8: return "u8";
    }
    return "unknown dtype " + std::to_string(static_cast<int>(dtype));
}

std::string to_string(Layout layout) {
    switch (layout) {
        case Layout::bhnd: return "bhnd";
        case Layout::bnhd: return "bnhd";
    }
    return "unknown layout " + std::to_string(static_cast<int>(layout));
}

std::string to_string(Causal causal) {
    switch (causal) {
        case Causal::none: return "none";
        case Causal::top_left: return "top-left";
        case Causal::bottom_right: return "bottom-right";
    }
    return "unknown causal mode " + std::to_string(static_cast<int>(causal));
}

std::string to_string(Impl impl) {
    switch (impl) {
        case Impl::automatic: return "auto";
        case Impl::unfused: return "unfused";
        case Impl::fused: return "fused";
        case Impl::split: return "split";
    }
    return "unknown impl " + std::to_string(static_cast<int>(impl));
}

std::array<std::int64_t, 4> dense_strides(Layout layout, const std::array<std::int64_t, 4>& shape) {
    const auto [B, H, N, D] = shape;
    (void)B;
    if (layout == Layout::bnhd) return {N * H * D, D, H * D, 1};  // memory is [B, N, H, D]
    return {H * N * D, N * D, D, 1};
}

// binary32: 1 sign, 8 exponent (bias 127), 23 mantissa bits.
// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals are m·2^-24.
namespace {

// Shifts `mantissa` right by `shift` (1..31) rounding to nearest, ties to even.
std::uint32_t shift_round_even(std::uint32_t mantissa, int shift) {
    const std::uint32_t kept = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((std::uint32_t{1} << shift) - 1);
    const std::uint32_t half = std::uint32_t{1} << (shift - 1);
    return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

std::uint16_t float_to_half(float value) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t abs = x & 0x7fffffffu;

    if (abs >= 0x7f800000u) {  // inf or NaN; a NaN keeps its top payload bits and is made quiet
        if (abs == 0x7f800000u) return sign | 0x7c00u;
        return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    }
    // 65520 = 65504 + half an ulp: from there on the value rounds (ties to even) to infinity.
    if (abs >= 0x477ff000u) return sign | 0x7c00u;

    const int exponent = static_cast<int>(abs >> 23);  // biased, float
    if (exponent >= 113) {
        // Normal half. A carry out of the mantissa correctly bumps the exponent.
        const std::uint32_t bits = (static_cast<std::uint32_t>(exponent - 112) << 23) |
                                   (abs & 0x7fffffu);
        return static_cast<std::uint16_t>(sign | shift_round_even(bits, 13));
    }
    // Subnormal half (or zero): value = m·2^(exponent-150) = h·2^-24, so h = m >> (126 - exponent).
    // Below 2^-25 (shift >= 25) everything rounds to zero; a carry up to 0x400 is the smallest normal.
    const int shift = 126 - exponent;
    if (shift >= 25) return sign;
    const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    return static_cast<std::uint16_t>(sign | shift_round_even(mantissa, shift));
}

float half_to_float(std::uint16_t bits) {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    std::uint32_t exponent = (bits >> 10) & 0x1fu;
    std::uint32_t mantissa = bits & 0x3ffu;

    if (exponent == 0x1f)  // inf, or NaN with its payload
        return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return std::bit_cast<float>(sign);
        // Subnormal: normalise, so the float exponent is 113 - (number of shifts).
        exponent = 113;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        return std::bit_cast<float>(sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13));
    }
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace vkattn

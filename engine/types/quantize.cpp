// ggml's block formats, rewritten from ggml's quantize_row_*_ref and dequantize_row_* (ggml-quants.c)
// so that every block is bit for bit the one ggml writes. The float operations and their order
// follow ggml's C exactly; this file is compiled with -ffp-contract=off (engine/CMakeLists.txt), as
// ggml's reference is, so that no multiply-add is fused into a differently rounded one.
#include "vkattn/quantize.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "tensor/storage_rules.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace {

constexpr int kQk = 32;  // elements per block

std::uint16_t read_u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
void write_u16(std::uint8_t* p, std::uint16_t v) {
    p[0] = static_cast<std::uint8_t>(v & 0xff);
    p[1] = static_cast<std::uint8_t>(v >> 8);
}
float read_half(const std::uint8_t* p) { return half_to_float(read_u16(p)); }
void write_half(std::uint8_t* p, float v) { write_u16(p, float_to_half(v)); }

// C's (int8_t) / (uint8_t) cast of a float, as ggml's quantizers truncate; defined here for values
// outside the type (only a subnormal scale's infinite reciprocal makes them), which give 0.
int truncate_to(float v, int lo, int hi) {
    if (!(v >= static_cast<float>(lo) && v < static_cast<float>(hi) + 1.0f)) return 0;
    return static_cast<int>(v);
}
int to_int8(float v) { return truncate_to(v, -128, 127); }
int to_uint8(float v) { return truncate_to(v, 0, 255); }

// The signed value of largest magnitude (the first of equal magnitudes), as q4_0/q5_0/iq4_nl take it.
float signed_max(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j)
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    return max;
}

void quantize_q8_0(const float* x, std::uint8_t* y) {
    float amax = 0.0f;
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_half(y, d);
    for (int j = 0; j < kQk; ++j) y[2 + j] = static_cast<std::uint8_t>(to_int8(std::round(x[j] * id)));
}

// q4_0 (levels 16, offset 8) and q5_0 (levels 32, offset 16): d = max / -offset.
void quantize_symmetric(const float* x, std::uint8_t* y, int bits) {
    const int offset = 1 << (bits - 1), top = (1 << bits) - 1;
    const float max = signed_max(x, kQk);
    const float d = max / static_cast<float>(-offset);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float bias = static_cast<float>(offset) + 0.5f;
    write_half(y, d);
    std::uint32_t qh = 0;
    std::uint8_t* qs = y + (bits == 5 ? 6 : 2);
    for (int j = 0; j < kQk / 2; ++j) {
        const float x0 = x[j] * id, x1 = x[kQk / 2 + j] * id;
        const int xi0 = std::min(top, to_int8(x0 + bias)) & 0xff;  // ggml stores MIN(...) as uint8_t
        const int xi1 = std::min(top, to_int8(x1 + bias)) & 0xff;
        qs[j] = static_cast<std::uint8_t>((xi0 & 0x0f) | ((xi1 & 0x0f) << 4));
        qh |= ((static_cast<std::uint32_t>(xi0) & 0x10u) >> 4) << j;
        qh |= ((static_cast<std::uint32_t>(xi1) & 0x10u) >> 4) << (j + kQk / 2);
    }
    if (bits == 5) std::memcpy(y + 2, &qh, 4);  // little-endian, as ggml's memcpy on its hosts
}

// q4_1 and q5_1: d = (max - min) / (levels - 1), m = min.
void quantize_affine(const float* x, std::uint8_t* y, int bits) {
    const int top = (1 << bits) - 1;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQk; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / static_cast<float>(top);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    write_half(y, d);
    write_half(y + 2, min);
    std::uint32_t qh = 0;
    std::uint8_t* qs = y + (bits == 5 ? 8 : 4);
    for (int j = 0; j < kQk / 2; ++j) {
        const float x0 = (x[j] - min) * id, x1 = (x[kQk / 2 + j] - min) * id;
        int xi0 = 0, xi1 = 0;
        if (bits == 4) {
            xi0 = std::min(15, to_int8(x0 + 0.5f)) & 0xff;
            xi1 = std::min(15, to_int8(x1 + 0.5f)) & 0xff;
        } else {
            xi0 = to_uint8(x0 + 0.5f);
            xi1 = to_uint8(x1 + 0.5f);
        }
        qs[j] = static_cast<std::uint8_t>((xi0 & 0x0f) | ((xi1 & 0x0f) << 4));
        qh |= ((static_cast<std::uint32_t>(xi0) & 0x10u) >> 4) << j;
        qh |= ((static_cast<std::uint32_t>(xi1) & 0x10u) >> 4) << (j + kQk / 2);
    }
    if (bits == 5) std::memcpy(y + 4, &qh, 4);
}

// ggml's best_index_int8: the nearest of the sorted values (the upper one on a tie).
int best_index(float x) {
    const std::int8_t* val = kIq4nlValues;
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav;
        else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// ggml's quantize_row_iq4_nl_ref: quantize_row_iq4_nl_impl for one block of 32 with ntry = -1 and
// no importance matrix. The block's largest magnitude maps to values[0]; one pass picks the nearest
// value for each element and refits the scale by least squares with weights x², and the indices
// are not recomputed for the refitted scale. A block below 1e-15 gets d = 0 (ggml then packs
// indices it never computed; here they are 0).
void quantize_iq4_nl(const float* x, std::uint8_t* y) {
    const std::int8_t* values = kIq4nlValues;
    std::uint8_t L[kQk] = {};
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQk; ++j) {
        const float ax = std::fabs(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    float d = 0.0f;
    if (amax >= 1e-15f) {  // GROUP_MAX_EPS
        const float id = 1 / (max / values[0]);
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < kQk; ++j) {
            const int l = best_index(id * x[j]);
            L[j] = static_cast<std::uint8_t>(l);
            const float q = values[l];
            const float w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    }
    write_half(y, d);
    for (int j = 0; j < kQk / 2; ++j) y[2 + j] = static_cast<std::uint8_t>(L[j] | (L[kQk / 2 + j] << 4));
}

void dequantize_block(DType dtype, const std::uint8_t* b, float* y) {
    const float d = read_half(b);
    switch (dtype) {
        case DType::q8_0:
            for (int j = 0; j < kQk; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
            return;
        case DType::q4_0:
            for (int j = 0; j < kQk / 2; ++j) {
                y[j] = static_cast<float>((b[2 + j] & 0x0f) - 8) * d;
                y[j + kQk / 2] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
            }
            return;
        case DType::q4_1: {
            const float m = read_half(b + 2);
            for (int j = 0; j < kQk / 2; ++j) {
                y[j] = static_cast<float>(b[4 + j] & 0x0f) * d + m;
                y[j + kQk / 2] = static_cast<float>(b[4 + j] >> 4) * d + m;
            }
            return;
        }
        case DType::q5_0:
        case DType::q5_1: {
            const bool affine = dtype == DType::q5_1;
            const float m = affine ? read_half(b + 2) : 0.0f;
            std::uint32_t qh = 0;
            std::memcpy(&qh, b + (affine ? 4 : 2), 4);
            const std::uint8_t* qs = b + (affine ? 8 : 6);
            for (int j = 0; j < kQk / 2; ++j) {
                const int x0 = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) << 4) & 0x10u);
                const int x1 = (qs[j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10u);
                if (affine) {
                    y[j] = static_cast<float>(x0) * d + m;
                    y[j + kQk / 2] = static_cast<float>(x1) * d + m;
                } else {
                    y[j] = static_cast<float>(x0 - 16) * d;
                    y[j + kQk / 2] = static_cast<float>(x1 - 16) * d;
                }
            }
            return;
        }
        case DType::iq4_nl:
            for (int j = 0; j < kQk / 2; ++j) {
                y[j] = d * kIq4nlValues[b[2 + j] & 0x0f];
                y[j + kQk / 2] = d * kIq4nlValues[b[2 + j] >> 4];
            }
            return;
        default: break;
    }
    throw InvalidArgument("dtype", to_string(dtype) + " is not a block type.");
}

void check_row(DType dtype, std::size_t features, std::size_t bytes, const char* bytes_name) {
    if (dtype == DType::i32 || dtype == DType::u8)
        throw InvalidArgument("dtype", to_string(dtype) + " holds no float values.");
    if (features % block_elements(dtype) != 0)
        throw InvalidArgument("dtype", "a row of " + to_string(dtype) + " holds whole blocks of " +
                                           std::to_string(block_elements(dtype)) + " features, not " +
                                           std::to_string(features) + ".");
    const std::uint64_t expected = row_bytes(dtype, static_cast<std::int64_t>(features));
    if (bytes != expected)
        throw InvalidArgument(bytes_name, "it holds " + std::to_string(bytes) + " bytes, but a row of " +
                                              std::to_string(features) + " " + to_string(dtype) + " features takes " +
                                              std::to_string(expected) + ".");
}

// An fp8 type's layout: mantissa bits and exponent bias.
struct Fp8Format {
    int mantissa, bias;
    std::uint8_t max_code, nan_code;  // the largest finite magnitude's code; a quiet NaN's
    float max;                        // the largest finite magnitude (max_code's value)
};
Fp8Format fp8_format(DType dtype) {
    if (dtype == DType::fp8_e4m3) return {3, 7, 0x7e, 0x7f, 448.0f};
    if (dtype == DType::fp8_e5m2) return {2, 15, 0x7b, 0x7e, 57344.0f};
    throw InvalidArgument("dtype", to_string(dtype) + " is not an fp8 type.");
}

void check_scale(DType dtype, float scale) {
    if (is_fp8(dtype)) {
        if (!(std::isfinite(scale) && scale > 0.0f))
            throw InvalidArgument("scale", "an fp8 scale is a finite number above 0, not " + std::to_string(scale) + ".");
    } else if (scale != 1.0f) {
        throw InvalidArgument("scale", "only fp8 rows have a scale; " + to_string(dtype) + " takes 1.");
    }
}

}  // namespace

float fp8_max(DType dtype) { return fp8_format(dtype).max; }

std::uint8_t float_to_fp8(DType dtype, float value) {
    const Fp8Format f = fp8_format(dtype);
    const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
    if (std::isnan(value)) return sign | f.nan_code;
    const float a = std::fabs(value);
    if (a >= f.max) return sign | f.max_code;  // saturate, infinities too
    // The grid's spacing at a: 2^(e - mantissa), e the exponent of a, at least the smallest normal's.
    const int e = std::max(std::ilogb(a == 0.0f ? 1.0f : a), 1 - f.bias);
    const float quantum = std::ldexp(1.0f, e - f.mantissa);
    const float rounded = std::nearbyint(a / quantum) * quantum;  // exact: a power-of-two scaling
    if (rounded == 0.0f) return sign;
    if (rounded > f.max) return sign | f.max_code;
    const int re = std::ilogb(rounded);
    if (re < 1 - f.bias)  // subnormal: the code is the multiple of the smallest step
        return sign | static_cast<std::uint8_t>(std::ldexp(rounded, f.bias - 1 + f.mantissa));
    const auto mantissa = static_cast<int>(std::ldexp(rounded, f.mantissa - re)) - (1 << f.mantissa);
    return sign | static_cast<std::uint8_t>(((re + f.bias) << f.mantissa) | mantissa);
}

float fp8_to_float(DType dtype, std::uint8_t bits) {
    const Fp8Format f = fp8_format(dtype);
    const float sign = (bits & 0x80) != 0 ? -1.0f : 1.0f;
    const int magnitude = bits & 0x7f;
    const int exponent = magnitude >> f.mantissa, mantissa = magnitude & ((1 << f.mantissa) - 1);
    if (dtype == DType::fp8_e4m3 && magnitude == 0x7f) return std::numeric_limits<float>::quiet_NaN();
    if (dtype == DType::fp8_e5m2 && exponent == 31)
        return mantissa == 0 ? sign * std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), 1 - f.bias - f.mantissa);
    return sign * std::ldexp(static_cast<float>(mantissa + (1 << f.mantissa)), exponent - f.bias - f.mantissa);
}

std::uint64_t row_bytes(DType dtype, std::int64_t features) { return storage_bytes(dtype, features); }

void quantize_row(DType dtype, std::span<const float> in, std::span<std::uint8_t> out, float scale) {
    check_row(dtype, in.size(), out.size(), "out");
    check_scale(dtype, scale);
    std::uint8_t* y = out.data();
    const float* x = in.data();
    for (std::size_t i = 0; i < in.size(); ++i)
        switch (dtype) {
            case DType::f32: std::memcpy(y + 4 * i, x + i, 4); break;
            case DType::f16: write_half(y + 2 * i, x[i]); break;
            case DType::bf16: write_u16(y + 2 * i, float_to_bf16(x[i])); break;
            case DType::fp8_e4m3:
            case DType::fp8_e5m2: y[i] = float_to_fp8(dtype, x[i] / scale); break;  // vLLM's x / scale
            default: i = in.size(); break;  // block types below
        }
    if (!is_block_type(dtype)) return;
    const std::size_t bb = block_bytes(dtype);
    for (std::size_t blk = 0; blk < in.size() / kQk; ++blk, x += kQk, y += bb)
        switch (dtype) {
            case DType::q8_0: quantize_q8_0(x, y); break;
            case DType::q4_0: quantize_symmetric(x, y, 4); break;
            case DType::q5_0: quantize_symmetric(x, y, 5); break;
            case DType::q4_1: quantize_affine(x, y, 4); break;
            case DType::q5_1: quantize_affine(x, y, 5); break;
            case DType::iq4_nl: quantize_iq4_nl(x, y); break;
            default: break;
        }
}

void dequantize_row(DType dtype, std::span<const std::uint8_t> in, std::span<float> out, float scale) {
    check_row(dtype, out.size(), in.size(), "in");
    check_scale(dtype, scale);
    if (!is_block_type(dtype)) {
        for (std::size_t i = 0; i < out.size(); ++i)
            out[i] = load_element(in.data(), dtype, static_cast<std::int64_t>(i)) * scale;  // exact for scale 1
        return;
    }
    const std::size_t bb = block_bytes(dtype);
    for (std::size_t blk = 0; blk < out.size() / kQk; ++blk) dequantize_block(dtype, in.data() + blk * bb, out.data() + blk * kQk);
}

float load_element(const void* data, DType dtype, std::int64_t index) {
    const auto* bytes = static_cast<const std::uint8_t*>(data);
    const auto i = static_cast<std::size_t>(index);
    switch (dtype) {
        case DType::f32: {
            float v;
            std::memcpy(&v, bytes + 4 * i, 4);
            return v;
        }
        case DType::f16: return read_half(bytes + 2 * i);
        case DType::bf16: return bf16_to_float(read_u16(bytes + 2 * i));
        case DType::fp8_e4m3:
        case DType::fp8_e5m2: return fp8_to_float(dtype, bytes[i]);
        case DType::i32:
        case DType::u8: throw InvalidArgument("dtype", to_string(dtype) + " holds no float values.");
        default: break;
    }
    float block[kQk];
    dequantize_block(dtype, bytes + i / kQk * block_bytes(dtype), block);
    return block[i % kQk];
}

}  // namespace vkattn

namespace vkattn::detail {

void check_block_rows(const char* name, DType dtype, const std::array<std::int64_t, 4>& shape,
                      const std::array<std::int64_t, 4>& strides) {
    if (!is_block_type(dtype)) return;
    const auto block = static_cast<std::int64_t>(block_elements(dtype));
    if (shape[3] % block != 0)
        throw InvalidArgument(name, to_string(dtype) + " stores blocks of " + std::to_string(block) +
                                        " features along the head dimension, so D must be a multiple of " +
                                        std::to_string(block) + ", not " + std::to_string(shape[3]) + ".");
    for (int i = 0; i < 3; ++i)
        if (shape[i] > 1 && strides[i] % block != 0)
            throw InvalidArgument(name, "a " + to_string(dtype) + " row must start on a block of " +
                                            std::to_string(block) + " elements, but stride " + std::to_string(i) +
                                            " is " + std::to_string(strides[i]) + ".");
}

}  // namespace vkattn::detail

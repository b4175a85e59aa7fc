// ggml's reference quantizers (quantize_row_*_ref) on the device, block for block the bytes
// vkattn::quantize_row writes (engine/types/quantize.cpp, itself checked against ggml's own). Bit
// for bit needs the same IEEE operations in the same order: products and sums are `precise` (no
// multiply-add fused into one rounding), divisions are div_rn (Vulkan lets a / b be 2.5 ulp off),
// and fp16 scales are rounded by half_bits (the driver's float-to-half rounding mode is its own).
#ifndef VKATTN_QUANTIZE_GLSL
#define VKATTN_QUANTIZE_GLSL

#include "common/storage_types.glsl"

// a / b rounded to nearest even, exactly as IEEE division, for finite a and finite non-zero b
// (what the quantizers divide: a scale by a constant, 1 by a scale, two sums). Long division of the
// 24-bit significands gives 26 quotient bits and a sticky remainder.
float div_rn(float a, float b) {
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const uint sign = (ua ^ ub) & 0x80000000u;
    if ((ua & 0x7fffffffu) == 0u) return uintBitsToFloat(sign);
    if ((ua & 0x7f800000u) == 0x7f800000u) return a / b;  // inf or NaN: exact either way
    int xa = int((ua >> 23) & 0xffu), xb = int((ub >> 23) & 0xffu);
    uint ma = ua & 0x7fffffu, mb = ub & 0x7fffffu;
    if (xa == 0) {  // subnormal: normalise
        const int s = 23 - findMSB(ma);
        ma <<= uint(s);
        xa = 1 - s;
    } else {
        ma |= 0x800000u;
    }
    if (xb == 0) {
        const int s = 23 - findMSB(mb);
        mb <<= uint(s);
        xb = 1 - s;
    } else {
        mb |= 0x800000u;
    }
    uint q = 0u, r = ma;  // q = floor(ma · 2^25 / mb), in [2^24, 2^26)
    for (int i = 0; i < 26; ++i) {
        q <<= 1;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1;
    }
    const bool sticky = r != 0u;
    // a / b = (q / 2^25) · 2^(xa − xb), normalised to a significand in [1, 2) of 24 bits.
    const bool wide = q >= (1u << 25);
    const int e = xa - xb + (wide ? 127 : 126);  // biased exponent
    if (e >= 255) return uintBitsToFloat(sign | 0x7f800000u);
    const int shift = (wide ? 2 : 1) + (e >= 1 ? 0 : 1 - e);  // subnormal results shift further
    if (shift > 26) return uintBitsToFloat(sign);  // below half the smallest subnormal
    const uint kept = q >> uint(shift), rest = q & ((1u << uint(shift)) - 1u), halfway = 1u << uint(shift - 1);
    const bool up = rest > halfway || (rest == halfway && (sticky || (kept & 1u) != 0u));
    uint bits = (e >= 1 ? uint(e - 1) << 23 : 0u) + kept + (up ? 1u : 0u);  // a carry bumps the exponent
    if (bits >= 0x7f800000u) bits = 0x7f800000u;
    return uintBitsToFloat(sign | bits);
}

// binary16 bits of x, rounded to nearest even (vkattn::float_to_half; ggml's GGML_FP32_TO_FP16).
uint half_bits(float x) {
    const uint u = floatBitsToUint(x);
    const uint sign = (u >> 16) & 0x8000u, abs_bits = u & 0x7fffffffu;
    if (abs_bits >= 0x7f800000u)
        return abs_bits == 0x7f800000u ? sign | 0x7c00u : sign | 0x7e00u | ((abs_bits >> 13) & 0x3ffu);
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to infinity
    const int exponent = int(abs_bits >> 23);
    uint m;
    int shift;
    if (exponent >= 113) {  // normal half: a carry out of the mantissa bumps the exponent
        m = (uint(exponent - 112) << 23) | (abs_bits & 0x7fffffu);
        shift = 13;
    } else {
        shift = 126 - exponent;
        if (shift >= 25) return sign;
        m = (abs_bits & 0x7fffffu) | 0x800000u;
    }
    const uint kept = m >> uint(shift), rest = m & ((1u << uint(shift)) - 1u), halfway = 1u << uint(shift - 1);
    return sign | (kept + ((rest > halfway || (rest == halfway && (kept & 1u) != 0u)) ? 1u : 0u));
}

// C's roundf: halves away from zero.
float round_away(float v) {
    const float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}
// C's (int8_t) and (uint8_t) casts of a float (truncation), 0 outside the type (as vkattn's host
// quantizer defines ggml's undefined casts of a subnormal scale's infinite reciprocal).
int to_int8(float v) { return v >= -128.0 && v < 128.0 ? int(v) : 0; }
int to_uint8(float v) { return v >= 0.0 && v < 256.0 ? int(v) : 0; }

// ggml's best_index_int8 over the iq4_nl values: the nearest, the upper one on a tie.
uint iq4nl_best_index(float x) {
    if (x <= -127.0) return 0u;
    if (x >= 113.0) return 15u;
    uint ml = 0u, mu = 15u;
    while (mu - ml > 1u) {
        const uint mav = (ml + mu) / 2u;
        if (x < float(iq4nl_value(mav))) mu = mav;
        else ml = mav;
    }
    precise const float below = x - float(iq4nl_value(mu - 1u)), above = float(iq4nl_value(mu)) - x;
    return below < above ? mu - 1u : mu;
}

// The block of `type` for 32 values, as 16-bit halves of its bytes (little-endian), `count` of them:
// q8_0 17, q4_0 9, q4_1 10, q5_0 11, q5_1 12, iq4_nl 9 (block_bytes / 2).
void quantize_block(uint type, float x[32], out uint halves[17]) {
    [[unroll]] for (uint i = 0u; i < 17u; ++i) halves[i] = 0u;
    uint q[32];
    if (type == TYPE_Q8_0) {
        float amax = 0.0;
        [[unroll]] for (uint j = 0u; j < 32u; ++j) amax = amax > abs(x[j]) ? amax : abs(x[j]);  // ggml's MAX
        const float d = div_rn(amax, 127.0);
        const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
        halves[0] = half_bits(d);
        [[unroll]] for (uint j = 0u; j < 32u; ++j) {
            precise const float v = x[j] * id;
            q[j] = uint(to_int8(round_away(v))) & 0xffu;
        }
        [[unroll]] for (uint j = 0u; j < 32u; j += 2u) halves[1u + j / 2u] = q[j] | (q[j + 1u] << 8);
        return;
    }
    uint qh = 0u;
    float d = 0.0, m = 0.0;
    if (type == TYPE_Q4_0 || type == TYPE_Q5_0) {
        const bool five = type == TYPE_Q5_0;
        float amax = 0.0, max_value = 0.0;
        [[unroll]] for (uint j = 0u; j < 32u; ++j)
            if (amax < abs(x[j])) {
                amax = abs(x[j]);
                max_value = x[j];
            }
        d = div_rn(max_value, five ? -16.0 : -8.0);
        const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
        const float bias = five ? 16.5 : 8.5;
        const int top = five ? 31 : 15;
        [[unroll]] for (uint j = 0u; j < 32u; ++j) {
            precise const float v = x[j] * id;
            precise const float shifted = v + bias;
            q[j] = uint(min(top, to_int8(shifted))) & 0xffu;
        }
    } else if (type == TYPE_Q4_1 || type == TYPE_Q5_1) {
        const bool five = type == TYPE_Q5_1;
        float lo = 3.402823466e38, hi = -3.402823466e38;
        [[unroll]] for (uint j = 0u; j < 32u; ++j) {
            if (x[j] < lo) lo = x[j];
            if (x[j] > hi) hi = x[j];
        }
        precise const float range = hi - lo;
        d = div_rn(range, five ? 31.0 : 15.0);
        m = lo;
        const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
        [[unroll]] for (uint j = 0u; j < 32u; ++j) {
            precise const float v = (x[j] - lo) * id;
            precise const float shifted = v + 0.5;
            q[j] = five ? uint(to_uint8(shifted)) : uint(min(15, to_int8(shifted))) & 0xffu;
        }
    } else {  // TYPE_IQ4_NL: quantize_row_iq4_nl_ref, one least-squares refit (engine/types/quantize.cpp)
        float amax = 0.0, max_value = 0.0;
        [[unroll]] for (uint j = 0u; j < 32u; ++j)
            if (abs(x[j]) > amax) {
                amax = abs(x[j]);
                max_value = x[j];
            }
        [[unroll]] for (uint j = 0u; j < 32u; ++j) q[j] = 0u;
        if (amax >= uintBitsToFloat(0x26901d7du)) {  // GROUP_MAX_EPS, 1e-15f
            const float id = div_rn(1.0, div_rn(max_value, -127.0));
            precise float sumqx = 0.0, sumq2 = 0.0;
            [[unroll]] for (uint j = 0u; j < 32u; ++j) {
                precise const float al = id * x[j];
                q[j] = iq4nl_best_index(al);
                const float level = float(iq4nl_value(q[j]));
                precise const float w = x[j] * x[j];
                precise const float wq = w * level;
                sumqx = sumqx + wq * x[j];
                sumq2 = sumq2 + wq * level;
            }
            d = sumq2 > 0.0 ? div_rn(sumqx, sumq2) : 0.0;
        }
    }
    // The 4-bit types: element j < 16 in byte j's low nibble, j + 16 in its high nibble.
    const uint head = type == TYPE_Q4_1 ? 2u : type == TYPE_Q5_0 ? 3u : type == TYPE_Q5_1 ? 4u : 1u;
    halves[0] = half_bits(d);
    if (type == TYPE_Q4_1 || type == TYPE_Q5_1) halves[1] = half_bits(m);
    if (type == TYPE_Q5_0 || type == TYPE_Q5_1) {
        [[unroll]] for (uint j = 0u; j < 32u; ++j) qh |= ((q[j] >> 4) & 1u) << j;
        halves[head - 2u] = qh & 0xffffu;
        halves[head - 1u] = qh >> 16;
    }
    [[unroll]] for (uint j = 0u; j < 16u; j += 2u)
        halves[head + j / 2u] = ((q[j] & 15u) | ((q[j + 16u] & 15u) << 4)) | (((q[j + 1u] & 15u) | ((q[j + 17u] & 15u) << 4)) << 8);
}

// The fp8 byte of x (vkattn::float_to_fp8): rounded to nearest even on the type's grid, saturated
// to ±max (infinities too), NaN kept. The grid's spacing at |x| is 2^(e − mantissa bits), e the
// exponent of |x| but at least the smallest normal's; the scaling by it is exact, roundEven too.
uint fp8_bits(float x, uint type) {
    const bool e4m3 = type == TYPE_FP8_E4M3;
    const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const uint max_code = e4m3 ? 0x7eu : 0x7bu;
    const uint u = floatBitsToUint(x), abs_bits = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
    if (abs_bits > 0x7f800000u) return sign | (e4m3 ? 0x7fu : 0x7eu);  // NaN (by its bits)
    const float a = uintBitsToFloat(abs_bits);
    if (a >= (e4m3 ? 448.0 : 57344.0)) return sign | max_code;
    const int e = max(int(abs_bits >> 23) - 127, 1 - bias);
    const uint q = uint(roundEven(ldexp(a, mbits - e)));  // a / spacing: at most 2^(mbits + 1)
    // Normal: ((e + bias) << mbits) + q − 2^mbits, a carry bumping the exponent; subnormal (e =
    // 1 − bias): q itself. One formula for both.
    return sign | min(max_code, (uint(e + bias - 1) << uint(mbits)) + q);
}

// Halves of a block of `type`.
uint block_halves(uint type) {
    return type == TYPE_Q8_0 ? 17u : type == TYPE_Q4_1 ? 10u : type == TYPE_Q5_0 ? 11u : type == TYPE_Q5_1 ? 12u : 9u;
}

#endif

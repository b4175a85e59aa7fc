// The storage types' codes as the shaders see them (spec constants Q_TYPE, K_TYPE, ...); the host's
// shader_type_code() (engine/attention/kernels.cpp) maps vkattn::DType onto them.
#ifndef VKATTN_STORAGE_TYPES_GLSL
#define VKATTN_STORAGE_TYPES_GLSL

const uint TYPE_F32 = 0u;
const uint TYPE_F16 = 1u;
const uint TYPE_BF16 = 2u;
const uint TYPE_Q8_0 = 3u;    // ggml's blocks of 32 (vkattn/quantize.hpp): {fp16 d; int8 q[32]}, 34 bytes
const uint TYPE_Q4_0 = 4u;    // {d; nibbles[16]}, 18 bytes: (q - 8)·d
const uint TYPE_Q4_1 = 5u;    // {d; m; nibbles[16]}, 20 bytes: q·d + m
const uint TYPE_Q5_0 = 6u;    // {d; u32 qh; nibbles[16]}, 22 bytes: (q - 16)·d, bit 4 of element e in qh bit e
const uint TYPE_Q5_1 = 7u;    // {d; m; qh; nibbles[16]}, 24 bytes: q·d + m
const uint TYPE_IQ4_NL = 8u;  // {d; nibbles[16]}, 18 bytes: d·values[q]
// In every 4-bit type, element j < 16 is the low nibble of byte j and element j + 16 its high nibble.
const uint TYPE_FP8_E4M3 = 9u;   // one byte: e4m3fn (bias 7, no infinities, S.1111.111 NaN), × the tensor's scale
const uint TYPE_FP8_E5M2 = 10u;  // one byte: e5m2 (bias 15, binary16's top byte), × the tensor's scale

bool is_fp8(uint type) { return type == TYPE_FP8_E4M3 || type == TYPE_FP8_E5M2; }
bool is_block_type(uint type) { return type >= TYPE_Q8_0 && type <= TYPE_IQ4_NL; }

// An fp8 byte's value (vkattn::fp8_to_float), built from its fields so that no subnormal passes
// through a conversion that could flush it. Selects, not branches: on SIMD devices a branch on a
// per-lane value runs both sides.
float fp8_value(uint bits, uint type) {
    const bool e4m3 = type == TYPE_FP8_E4M3;
    const uint mbits = e4m3 ? 3u : 2u, bias = e4m3 ? 7u : 15u;
    const uint magnitude = bits & 0x7fu, e = magnitude >> mbits, m = magnitude & ((1u << mbits) - 1u);
    // A normal's fields moved into binary32's, its exponent rebiased; a subnormal is m·2^(1 − bias − mbits).
    const float normal = uintBitsToFloat((magnitude << (23u - mbits)) + ((127u - bias) << 23));
    const float subnormal = float(m) * (e4m3 ? 1.0 / 512.0 : 1.0 / 65536.0);
    const bool special = e4m3 ? magnitude == 0x7fu : e == 31u;  // NaN, or e5m2's infinity
    const float special_value = uintBitsToFloat(e4m3 || m != 0u ? 0x7fc00000u : 0x7f800000u);
    const float v = special ? special_value : (e == 0u ? subnormal : normal);
    return uintBitsToFloat(floatBitsToUint(v) | ((bits & 0x80u) << 24));
}

// ggml's iq4_nl values (kvalues_iq4nl), four signed bytes per word.
int iq4nl_value(uint q) {
    const uvec4 packed = uvec4(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
    return bitfieldExtract(int(packed[q >> 2]), int(8u * (q & 3u)), 8);
}

// 4 consecutive elements 4j'..4j'+3 of a ggml block, from the fields that hold them: `bytes` their
// 4 bytes (q8_0) or the 4 bytes whose nibbles they are (the 4-bit types: low nibbles for elements
// 0-15, high for 16-31, `high`); `qh` the fifth bits (q5_*) shifted so that bit 0 is the first
// element's; `dm` the scale d and the minimum m (q4_1, q5_1). The one place the value formulas live.
vec4 block_values(uint type, uint bytes, bool high, uint qh, vec2 dm) {
    if (type == TYPE_Q8_0) {
        const int q = int(bytes);
        return vec4(bitfieldExtract(q, 0, 8), bitfieldExtract(q, 8, 8), bitfieldExtract(q, 16, 8), bitfieldExtract(q, 24, 8)) * dm.x;
    }
    const uint n = bytes >> (high ? 4u : 0u);
    uvec4 q = uvec4(n & 15u, (n >> 8) & 15u, (n >> 16) & 15u, (n >> 24) & 15u);
    if (type == TYPE_Q5_0 || type == TYPE_Q5_1) q |= (uvec4(qh, qh >> 1, qh >> 2, qh >> 3) & 1u) << 4;
    if (type == TYPE_Q4_0) return (vec4(q) - 8.0) * dm.x;
    if (type == TYPE_Q5_0) return (vec4(q) - 16.0) * dm.x;
    if (type == TYPE_Q4_1 || type == TYPE_Q5_1) return vec4(q) * dm.x + dm.y;
    return vec4(iq4nl_value(q.x), iq4nl_value(q.y), iq4nl_value(q.z), iq4nl_value(q.w)) * dm.x;  // TYPE_IQ4_NL
}

#endif

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

// ggml's iq4_nl values (kvalues_iq4nl), four signed bytes per word.
int iq4nl_value(uint q) {
    const uvec4 packed = uvec4(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
    return bitfieldExtract(int(packed[q >> 2]), int(8u * (q & 3u)), 8);
}

#endif

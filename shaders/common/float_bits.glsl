// Finite sentinels and IEEE special values by their bits. A Vulkan implementation may compile a
// shader as if no float were ±∞ or NaN (unless it declares SignedZeroInfNanPreserve, which the
// runtime adds only where the device supports it: engine/vk/spirv_float_controls.hpp), and then
// fold a compare with −∞ or an isnan() away. So the kernels' own logic uses a finite sentinel and
// explicit tests, and looks at the special values of inputs through integer bit tests, which no
// float assumption can fold.
#ifndef VKATTN_FLOAT_BITS_GLSL
#define VKATTN_FLOAT_BITS_GLSL

// A masked logit, and the running maximum of a row that has seen no visible key yet. Logits are
// compared with it for equality only; a finite logit below it (an overflowed score) counts as masked.
const float MASKED = -3.0e38;

bool is_nan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
bool is_negative_infinity(float x) { return floatBitsToUint(x) == 0xff800000u; }
// Written, never computed: the lse of an empty row (−∞), a poisoned row (NaN).
float negative_infinity() { return uintBitsToFloat(0xff800000u); }
float quiet_nan() { return uintBitsToFloat(0x7fc00000u); }
// bfloat16's bits of x: round to nearest even, a NaN stays a quiet NaN (vkattn::float_to_bf16).
uint bf16_bits(float x) {
    const uint u = floatBitsToUint(x);
    return is_nan(x) ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

#endif

// A typed loader of 4 consecutive elements from 32-bit words, for every storage type
// (common/storage_types.glsl). Included once per operand, with
//   TL_NAME  the function to define: vec4 TL_NAME(uint index, uint valid)
//   TL_SLOT  the binding of the operand's storage buffer (declared here as uint words)
//   TL_TYPE  the operand's type code, a specialization constant: every other branch is dead code
//            once the pipeline is created
//   TL_SCALE (optional) an fp8 operand's scale, an expression the includer keeps current (its
//            head's): fp8 values are fp8 · TL_SCALE, one fp32 rounding as vkattn::dequantize_row
//   TL_ALIGNED (optional, default false) true where every `index` is a multiple of 4: f16, bf16
//            and fp8 then read their 4 elements as whole words, no per-element fallback
// With WORD_TEXELS defined, the words come through an R32_UINT texel view (a usamplerBuffer) instead
// of a storage buffer: the same decoding, and on lavapipe a sixth of the cost per word.
// `index` is an element index into the binding (for a block type, element i lies in block i / 32,
// which slicing guarantees, engine/attention/slicing.hpp) and `valid` how many of the 4 elements
// exist (the rest read as 0 and are not loaded). Block types are read 4 elements at a time from
// index % 4 == 0 (D is a multiple of 32), so the 4 never straddle a block.
// Reading words needs no 8- or 16-bit storage feature. Block headers are 2-byte aligned, so a
// block's bytes are read as whole words and shifted: the reads past a block's last byte stay within
// the binding's 16-byte rounding. Per-lane conditions are selects where both sides load anyway (a
// SIMD device runs both sides of a branch its lanes disagree on, lavapipe even when they agree).
#extension GL_EXT_control_flow_attributes : enable
#include "common/storage_types.glsl"

#ifndef TL_ALIGNED
#define TL_ALIGNED false
#endif
#ifndef TL_SCALE
#define TL_SCALE 1.0
#endif
#define TL_CAT2(a, b) a##b
#define TL_CAT(a, b) TL_CAT2(a, b)
#define TL_W TL_CAT(TL_NAME, _words)

#ifdef WORD_TEXELS
layout(set = 0, binding = TL_SLOT) uniform usamplerBuffer TL_CAT(TL_NAME, _u32);
#define TL_WORD(i) texelFetch(TL_CAT(TL_NAME, _u32), int(i)).x
#else
layout(std430, set = 0, binding = TL_SLOT) readonly buffer TL_CAT(TL_NAME, _buffer) { uint TL_W[]; };
#define TL_WORD(i) TL_W[i]
#endif

// The 4 bytes at byte address `at` (any alignment), little-endian. Two words and a select, not a
// branch (lanes that disagree make a SIMD device run both sides of one); where `at` is aligned the
// second word is the first again, so that no read passes the 4 bytes.
uint TL_CAT(TL_NAME, _bytes4)(uint at) {
    const uint shift = (at & 3u) * 8u, first = at >> 2;
    const uint w0 = TL_WORD(first), w1 = TL_WORD(first + (shift != 0u ? 1u : 0u));
    return shift == 0u ? w0 : (w0 >> shift) | (w1 << (32u - shift));
}
// The fp16 at the 2-aligned byte address `at`, as a float.
float TL_CAT(TL_NAME, _half)(uint at) { return unpackHalf2x16(TL_WORD(at >> 2) >> ((at & 2u) * 8u)).x; }
// The 4 nibbles (low, or high when `high`) of 4 bytes, as 4 integers.
uvec4 TL_CAT(TL_NAME, _nibbles)(uint bytes, bool high) {
    const uint q = bytes >> (high ? 4u : 0u);
    return uvec4(q & 15u, (q >> 8) & 15u, (q >> 16) & 15u, (q >> 24) & 15u);
}

vec4 TL_NAME(uint index, uint valid) {
    if (TL_TYPE == TYPE_F32) {
        vec4 v = vec4(0.0);
        [[unroll]] for (uint c = 0u; c < 4u; ++c)
            if (c < valid) v[c] = uintBitsToFloat(TL_WORD(index + c));
        return v;
    }
    if (TL_TYPE == TYPE_F16 || TL_TYPE == TYPE_BF16) {
        uvec4 h = uvec4(0u);
        if (TL_ALIGNED || (index & 1u) == 0u) {  // two words hold the 4 elements
            const uint w0 = TL_WORD(index >> 1), w1 = valid > 2u ? TL_WORD((index >> 1) + 1u) : 0u;
            h = uvec4(w0 & 0xffffu, w0 >> 16, w1 & 0xffffu, w1 >> 16);
        } else {
            [[unroll]] for (uint c = 0u; c < 4u; ++c)
                if (c < valid) h[c] = (TL_WORD((index + c) >> 1) >> (((index + c) & 1u) * 16u)) & 0xffffu;
        }
        vec4 v;
        if (TL_TYPE == TYPE_BF16) v = uintBitsToFloat(h << 16);
        else v = vec4(unpackHalf2x16(h.x).x, unpackHalf2x16(h.y).x, unpackHalf2x16(h.z).x, unpackHalf2x16(h.w).x);
        [[unroll]] for (uint c = 1u; c < 4u; ++c)
            if (c >= valid) v[c] = 0.0;
        return v;
    }
    if (is_fp8(TL_TYPE)) {  // one byte per element; missing ones read as byte 0 (+0)
        uint w = 0u;
        if (TL_ALIGNED) {  // one word holds the 4 elements
            w = TL_WORD(index >> 2);
            if (valid < 4u) w &= (1u << (8u * valid)) - 1u;
        } else if (valid >= 4u) {
            w = TL_CAT(TL_NAME, _bytes4)(index);
        } else {
            [[unroll]] for (uint c = 0u; c < 4u; ++c)
                if (c < valid) w |= ((TL_WORD((index + c) >> 2) >> (((index + c) & 3u) * 8u)) & 0xffu) << (8u * c);
        }
        return vec4(fp8_value(w & 0xffu, TL_TYPE), fp8_value((w >> 8) & 0xffu, TL_TYPE),
                    fp8_value((w >> 16) & 0xffu, TL_TYPE), fp8_value(w >> 24, TL_TYPE)) * TL_SCALE;
    }
    const uint block = index >> 5, j = index & 31u, jl = j & 15u;
    const bool high = j >= 16u;
    if (TL_TYPE == TYPE_Q8_0) {
        const uint at = block * 34u;
        const int q = int(TL_CAT(TL_NAME, _bytes4)(at + 2u + j));
        return vec4(bitfieldExtract(q, 0, 8), bitfieldExtract(q, 8, 8), bitfieldExtract(q, 16, 8),
                    bitfieldExtract(q, 24, 8)) * TL_CAT(TL_NAME, _half)(at);
    }
    if (TL_TYPE == TYPE_Q4_0) {
        const uint at = block * 18u;
        const uvec4 q = TL_CAT(TL_NAME, _nibbles)(TL_CAT(TL_NAME, _bytes4)(at + 2u + jl), high);
        return (vec4(q) - 8.0) * TL_CAT(TL_NAME, _half)(at);
    }
    if (TL_TYPE == TYPE_Q4_1) {  // 20-byte blocks: d and m are one word, each 4 nibbles another
        const uint at = block * 20u;
        const vec2 dm = unpackHalf2x16(TL_WORD(at >> 2));
        return vec4(TL_CAT(TL_NAME, _nibbles)(TL_WORD((at + 4u + jl) >> 2), high)) * dm.x + dm.y;
    }
    if (TL_TYPE == TYPE_Q5_0 || TL_TYPE == TYPE_Q5_1) {
        const bool affine = TL_TYPE == TYPE_Q5_1;
        const uint at = block * (affine ? 24u : 22u);
        // q5_1's 24-byte blocks keep qh and the nibbles in whole words; q5_0's are 2-aligned.
        const uint qh = (affine ? TL_WORD((at + 4u) >> 2) : TL_CAT(TL_NAME, _bytes4)(at + 2u)) >> j;
        const uint bytes = affine ? TL_WORD((at + 8u + jl) >> 2) : TL_CAT(TL_NAME, _bytes4)(at + 6u + jl);
        const uvec4 q = TL_CAT(TL_NAME, _nibbles)(bytes, high) | (uvec4(qh, qh >> 1, qh >> 2, qh >> 3) & 1u) << 4;
        if (affine) {
            const vec2 dm = unpackHalf2x16(TL_WORD(at >> 2));
            return vec4(q) * dm.x + dm.y;
        }
        return (vec4(q) - 16.0) * TL_CAT(TL_NAME, _half)(at);
    }
    // TYPE_IQ4_NL
    const uint at = block * 18u;
    const uvec4 q = TL_CAT(TL_NAME, _nibbles)(TL_CAT(TL_NAME, _bytes4)(at + 2u + jl), high);
    return vec4(iq4nl_value(q.x), iq4nl_value(q.y), iq4nl_value(q.z), iq4nl_value(q.w)) * TL_CAT(TL_NAME, _half)(at);
}

#undef TL_W
#undef TL_WORD
#undef TL_NAME
#undef TL_SLOT
#undef TL_TYPE
#undef TL_SCALE
#undef TL_ALIGNED

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
// exist (the rest read as 0 and are not loaded). This loader reads block types 4 elements at a time
// from index % 4 == 0 (D is a multiple of 32), so the 4 never straddle a block; the _block loaders
// below read a whole block (or half of one) for loops that walk blocks.
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
#ifndef TL_BLOCK_DEFINED
#define TL_BLOCK_DEFINED
// One ggml block's fields in registers (the _block loaders below): data word i holds the data
// bytes 4i..4i+3 (q8_0's 32 bytes; the 4-bit types' 16 bytes of nibbles in words 0-3).
struct TlBlock {
    uint data[8];
    vec2 dm;  // d and m (m = 0 where the type has none)
    uint qh;  // q5_*: the fifth bits
};
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
        [[unroll]] for (uint c = 0u; c < 4u; ++c)
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
        return block_values(TL_TYPE, TL_CAT(TL_NAME, _bytes4)(at + 2u + j), false, 0u, vec2(TL_CAT(TL_NAME, _half)(at), 0.0));
    }
    if (TL_TYPE == TYPE_Q4_1) {  // 20-byte blocks: d and m are one word, each 4 nibbles another
        const uint at = block * 20u;
        return block_values(TL_TYPE, TL_WORD((at + 4u + jl) >> 2), high, 0u, unpackHalf2x16(TL_WORD(at >> 2)));
    }
    if (TL_TYPE == TYPE_Q5_0 || TL_TYPE == TYPE_Q5_1) {
        const bool affine = TL_TYPE == TYPE_Q5_1;
        const uint at = block * (affine ? 24u : 22u);
        // q5_1's 24-byte blocks keep qh and the nibbles in whole words; q5_0's are 2-aligned.
        const uint qh = (affine ? TL_WORD((at + 4u) >> 2) : TL_CAT(TL_NAME, _bytes4)(at + 2u)) >> j;
        const uint bytes = affine ? TL_WORD((at + 8u + jl) >> 2) : TL_CAT(TL_NAME, _bytes4)(at + 6u + jl);
        const vec2 dm = affine ? unpackHalf2x16(TL_WORD(at >> 2)) : vec2(TL_CAT(TL_NAME, _half)(at), 0.0);
        return block_values(TL_TYPE, bytes, high, qh, dm);
    }
    // TYPE_Q4_0 and TYPE_IQ4_NL: 18-byte blocks {d; nibbles}
    const uint at = block * 18u;
    return block_values(TL_TYPE, TL_CAT(TL_NAME, _bytes4)(at + 2u + jl), high, 0u, vec2(TL_CAT(TL_NAME, _half)(at), 0.0));
}

// A whole block of a ggml type (TL_TYPE a block type), for loops that walk K's head dimension a
// block at a time: its words are fetched once (9 for q8_0, 5 or 6 for the 4- and 5-bit types,
// where the vec4 loader above fetches 2-3 per 4 elements, the scale every time), then each 4
// elements decode from registers. `index` is the block's first element (a multiple of 32).
// The 2-aligned blocks (q8_0, q4_0, q5_0, iq4_nl: 34, 18, 22 bytes) start in the middle of a word
// every other block: both alignments are read with constant word indices and one is selected, so
// that no register array is indexed by a variable (lavapipe would spill it lane by lane). The words
// read past a block's last byte are those the vec4 loader reads (within the binding's rounding).
TlBlock TL_CAT(TL_NAME, _block)(uint index) {
    const uint block = index >> 5;
    const uint size = TL_TYPE == TYPE_Q8_0 ? 34u : TL_TYPE == TYPE_Q4_1 ? 20u : TL_TYPE == TYPE_Q5_0 ? 22u : TL_TYPE == TYPE_Q5_1 ? 24u : 18u;
    const uint at = block * size, first = at >> 2;
    const bool mid = (at & 2u) != 0u;  // the block starts at byte 2 of its first word
    const uint words = TL_TYPE == TYPE_Q8_0 ? 9u : TL_TYPE == TYPE_Q5_0 || TL_TYPE == TYPE_Q5_1 ? 6u : 5u;
    uint w[9];
    [[unroll]] for (uint i = 0u; i < 9u; ++i) w[i] = i < words ? TL_WORD(first + i) : 0u;
    TlBlock blk;
    blk.qh = 0u;
    if (TL_TYPE == TYPE_Q4_1 || TL_TYPE == TYPE_Q5_1) {  // 4-aligned: {d, m} one word, then qh (q5_1), then data
        const uint data = TL_TYPE == TYPE_Q5_1 ? 2u : 1u;
        blk.dm = unpackHalf2x16(w[0]);
        if (TL_TYPE == TYPE_Q5_1) blk.qh = w[1];
        [[unroll]] for (uint i = 0u; i < 8u; ++i) blk.data[i] = i < 4u ? w[data + i] : 0u;
        return blk;
    }
    // d, then qh (q5_0), then the data: data word i starts 2 bytes into w[i + head] (aligned block)
    // or at w[i + head + 1] (a block in mid-word), with head the words before the data.
    blk.dm = vec2(unpackHalf2x16(mid ? w[0] >> 16 : w[0]).x, 0.0);
    if (TL_TYPE == TYPE_Q5_0) blk.qh = mid ? w[1] : (w[0] >> 16) | (w[1] << 16);
    const uint head = TL_TYPE == TYPE_Q5_0 ? 1u : 0u;
    [[unroll]] for (uint i = 0u; i < 8u; ++i)
        blk.data[i] = i + head + 1u < 9u ? (mid ? w[i + head + 1u] : (w[i + head] >> 16) | (w[i + head + 1u] << 16)) : 0u;
    return blk;
}
// The half of a block that holds element `index`, for a lane that reads 16 consecutive elements
// (decoded by _half4 below): q8_0's scale and that half's 16 data bytes as data words 0-3 (6 words
// fetched, not 9); the other types' halves share every data byte, so they load the whole block. A
// q8_0 block in mid-word has its data on word boundaries: the fifth word is then read as the fourth
// again (no read past the block).
TlBlock TL_CAT(TL_NAME, _half_block)(uint index) {
    if (TL_TYPE != TYPE_Q8_0) return TL_CAT(TL_NAME, _block)(index);
    const uint at = (index >> 5) * 34u, data = (at + 2u + 16u * ((index >> 4) & 1u)) >> 2;
    const bool mid = (at & 2u) != 0u;
    uint u[5];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) u[i] = TL_WORD(data + i);
    u[4] = TL_WORD(data + (mid ? 3u : 4u));
    TlBlock blk;
    blk.dm = vec2(unpackHalf2x16(TL_WORD(at >> 2) >> (mid ? 16u : 0u)).x, 0.0);
    blk.qh = 0u;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) blk.data[i] = i < 4u ? (mid ? u[i] : (u[i] >> 16) | (u[i + 1u] << 16)) : 0u;
    return blk;
}
// Elements 4j..4j+3 of a block (j a constant: the loop that calls it is unrolled).
vec4 TL_CAT(TL_NAME, _block4)(TlBlock blk, uint j) {
    return block_values(TL_TYPE, blk.data[TL_TYPE == TYPE_Q8_0 ? j : j & 3u], TL_TYPE != TYPE_Q8_0 && j >= 4u, blk.qh >> (4u * j), blk.dm);
}
// Elements 4j..4j+3 of a half block, j = 4·half + t counted from the block's start. Every type's
// data word is j & 3, picked by selects rather than an index (j is per lane; written 4·half + t with
// t a constant, the compiler folds them away): a variable index would spill the array.
vec4 TL_CAT(TL_NAME, _half4)(TlBlock blk, uint j) {
    const uint word = j & 3u;
    uint bytes = blk.data[0];
    [[unroll]] for (uint i = 1u; i < 4u; ++i) bytes = word == i ? blk.data[i] : bytes;
    return block_values(TL_TYPE, bytes, TL_TYPE != TYPE_Q8_0 && j >= 4u, blk.qh >> (4u * j), blk.dm);
}

#undef TL_W
#undef TL_WORD
#undef TL_NAME
#undef TL_SLOT
#undef TL_TYPE
#undef TL_SCALE
#undef TL_ALIGNED

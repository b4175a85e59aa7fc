// A loader of one operand's rows in chunks, for flash_decode.comp: a chunk is the storage a lane
// fetches at once, 16 bytes of the plain types (4 f32, 8 f16 or bf16, 16 fp8 elements) or half a
// ggml block (16 elements), fetched into registers first (raw words: every load of a step is in
// flight before any is decoded) and decoded to floats from them. Included once per operand with
//   CL_NAME  the prefix of the functions it defines:
//            Chunk CL_NAME_fetch(uint index, uint valid)  the chunk whose first element is `index`
//                  (a multiple of the chunk size), `valid` of its elements in the row (0: no load)
//            vec4 CL_NAME_values(Chunk c, uint index, uint i)  its elements 4i..4i+3 (i a constant)
//   CL_SLOT  the binding of its storage buffer, declared here twice: as uint words and, for the
//            16-byte loads, as uvec4s (the same descriptor: Vulkan lets variables alias a binding)
//   CL_TYPE  its storage type (a specialization constant: common/storage_types.glsl)
//   CL_SCALE (optional) an fp8 operand's scale, as typed_load.glsl's TL_SCALE
// and the specialization constant WIDE declared: true where the host found every row of the plain
// types starting on 16 bytes and holding whole chunks, so a chunk is one uvec4 load; otherwise the
// words are fetched one by one (any alignment, partial chunks read as 0). Block types always fetch
// words: ggml's blocks (18-34 bytes) start on 2 bytes. The values are those typed_load.glsl gives
// (the same block_values and fp8_value), so the two loaders agree bit for bit.
#include "common/storage_types.glsl"

#ifndef CL_SCALE
#define CL_SCALE 1.0
#endif
#ifndef CL_CHUNK_DEFINED
#define CL_CHUNK_DEFINED
// One chunk's words: the 16 bytes of a plain type in a; a block type's bytes from the block's first
// (words a.x..b.y = bytes 0..23), except q8_0's half block: a = its 16 data bytes, b.x = the scale.
struct Chunk {
    uvec4 a;
    uvec2 b;
};
// A chunk's elements (the host's decode_chunk_elements, engine/attention/decode.cpp).
#define CHUNK_ELEMENTS(type) ((type) == TYPE_F32 ? 4u : ((type) == TYPE_F16 || (type) == TYPE_BF16) ? 8u : 16u)
// Word k (a constant) of a block's bytes as Chunk holds them, and the 4 bytes from byte 4k + 2.
uint chunk_word(Chunk c, uint k) { return k < 4u ? c.a[k] : c.b[k - 4u]; }
uint chunk_word_mid(Chunk c, uint k) { return (chunk_word(c, k) >> 16) | (k + 1u < 6u ? chunk_word(c, k + 1u) << 16 : 0u); }
#endif
#define CL_CAT2(a, b) a##b
#define CL_CAT(a, b) CL_CAT2(a, b)
#define CL_W CL_CAT(CL_NAME, _words)
#define CL_W4 CL_CAT(CL_NAME, _words4)

layout(std430, set = 0, binding = CL_SLOT) readonly buffer CL_CAT(CL_NAME, _buffer) { uint CL_W[]; };
layout(std430, set = 0, binding = CL_SLOT) readonly buffer CL_CAT(CL_NAME, _buffer4) { uvec4 CL_W4[]; };

Chunk CL_CAT(CL_NAME, _fetch)(uint index, uint valid) {
    Chunk c;
    c.a = uvec4(0u);
    c.b = uvec2(0u);
    if (valid == 0u) return c;
    if (is_block_type(CL_TYPE)) {
        const uint size = CL_TYPE == TYPE_Q8_0 ? 34u : CL_TYPE == TYPE_Q4_1 ? 20u : CL_TYPE == TYPE_Q5_0 ? 22u : CL_TYPE == TYPE_Q5_1 ? 24u : 18u;
        const uint at = (index >> 5) * size;
        uint w[6];
        if (CL_TYPE == TYPE_Q8_0) {
            // The scale, then the half's 16 data bytes: 4 words, or 5 shifted where they start
            // in mid-word (never past the block's 34 bytes rounded to a word).
            const uint data = at + 2u + 16u * ((index >> 4) & 1u), first = data >> 2;
            const bool mid = (data & 2u) != 0u;
            [[unroll]] for (uint i = 0u; i < 4u; ++i) w[i] = CL_W[first + i];
            w[4] = CL_W[first + (mid ? 4u : 3u)];
            [[unroll]] for (uint i = 0u; i < 4u; ++i) c.a[i] = mid ? (w[i] >> 16) | (w[i + 1u] << 16) : w[i];
            c.b.x = CL_W[at >> 2] >> ((at & 2u) * 8u);
            return c;
        }
        // The whole block (both halves share its data bytes): 5 words (18-20 bytes) or 6 (22-24),
        // shifted to start at its first byte where it starts in mid-word.
        const uint first = at >> 2, words = size > 20u ? 6u : 5u;
        const bool mid = (at & 2u) != 0u;
        [[unroll]] for (uint i = 0u; i < 6u; ++i) w[i] = i < words ? CL_W[first + i] : 0u;
        [[unroll]] for (uint i = 0u; i < 6u; ++i) {
            const uint v = mid ? (w[i] >> 16) | (i + 1u < 6u ? w[i + 1u] << 16 : 0u) : w[i];
            if (i < 4u) c.a[i] = v;
            else c.b[i - 4u] = v;
        }
        return c;
    }
    const uint per = CHUNK_ELEMENTS(CL_TYPE);
    if (WIDE) {
        c.a = CL_W4[index / per];
        return c;
    }
    // Word by word: f32 one element per word, f16 and bf16 two halves, fp8 four bytes, each packed
    // where it would lie in an aligned chunk; elements past `valid` stay 0 (and are not read).
    [[unroll]] for (uint e = 0u; e < per; ++e) {
        if (e >= valid) continue;
        const uint at = index + e;
        uint bits;
        if (CL_TYPE == TYPE_F32) bits = CL_W[at];
        else if (CL_TYPE == TYPE_F16 || CL_TYPE == TYPE_BF16) bits = (CL_W[at >> 1] >> ((at & 1u) * 16u)) & 0xffffu;
        else bits = (CL_W[at >> 2] >> ((at & 3u) * 8u)) & 0xffu;
        const uint bits_per = 32u / (per / 4u);
        c.a[e * bits_per / 32u] |= bits << ((e * bits_per) & 31u);
    }
    return c;
}

vec4 CL_CAT(CL_NAME, _values)(Chunk c, uint index, uint i) {
    if (CL_TYPE == TYPE_F32) return uintBitsToFloat(c.a);
    if (CL_TYPE == TYPE_F16 || CL_TYPE == TYPE_BF16) {
        const uint w0 = c.a[2u * i], w1 = c.a[2u * i + 1u];
        const uvec4 h = uvec4(w0 & 0xffffu, w0 >> 16, w1 & 0xffffu, w1 >> 16);
        if (CL_TYPE == TYPE_BF16) return uintBitsToFloat(h << 16);
        return vec4(unpackHalf2x16(w0), unpackHalf2x16(w1));
    }
    if (is_fp8(CL_TYPE)) {
        const uint w = c.a[i];
        return vec4(fp8_value(w & 0xffu, CL_TYPE), fp8_value((w >> 8) & 0xffu, CL_TYPE),
                    fp8_value((w >> 16) & 0xffu, CL_TYPE), fp8_value(w >> 24, CL_TYPE)) * CL_SCALE;
    }
    if (CL_TYPE == TYPE_Q8_0) return block_values(CL_TYPE, c.a[i], false, 0u, vec2(unpackHalf2x16(c.b.x).x, 0.0));
    // The 4- and 5-bit types: elements 16·half + 4i.. are the low (half 0) or high (half 1) nibbles
    // of data bytes 4i..4i+3; the fifth bits sit at the same element positions in qh.
    const uint half_index = (index >> 4) & 1u, shift = 16u * half_index + 4u * i;
    const bool high = half_index != 0u;
    if (CL_TYPE == TYPE_Q4_1) return block_values(CL_TYPE, chunk_word(c, 1u + i), high, 0u, unpackHalf2x16(c.a.x));
    if (CL_TYPE == TYPE_Q5_0) {
        const uint qh = chunk_word_mid(c, 0u);
        return block_values(CL_TYPE, chunk_word_mid(c, 1u + i), high, qh >> shift, vec2(unpackHalf2x16(c.a.x).x, 0.0));
    }
    if (CL_TYPE == TYPE_Q5_1) return block_values(CL_TYPE, chunk_word(c, 2u + i), high, c.a.y >> shift, unpackHalf2x16(c.a.x));
    // TYPE_Q4_0 and TYPE_IQ4_NL: {d; nibbles[16]}, the data from byte 2
    return block_values(CL_TYPE, chunk_word_mid(c, i), high, 0u, vec2(unpackHalf2x16(c.a.x).x, 0.0));
}

#undef CL_W
#undef CL_W4
#undef CL_NAME
#undef CL_SLOT
#undef CL_TYPE
#undef CL_SCALE

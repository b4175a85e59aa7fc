// The mask model, the GLSL twin of Problem::key_visible / Problem::additive
// (engine/attention/problem.hpp). Needs params.glsl and these bindings declared before inclusion:
//   kv_lengths[] (int), bool_words[] (uint, 4 mask bytes per word), float_mask[] (float).
// Every uniform is read once per row into a RowMask: on lavapipe each uniform-block read is a
// scalar memory access, far too dear to repeat per score.
#ifndef VKATTN_MASK_GLSL
#define VKATTN_MASK_GLSL

struct RowMask {
    uint limit;        // keys j >= limit are masked: the key length, and the causal diagonal
    bool has_bool;
    uint bool_base;    // byte index of (b, h, i, 0) in the bool mask
    uint bool_stride;  // bytes between keys (0 when broadcast over keys)
    bool has_float;
    uint float_base;
    uint float_stride;
};

int kv_length(uint b) { return P.masking.y != 0u ? kv_lengths[b] : int(P.attn.y); }

// The diagonal's offset: causal keeps key j for query i when j <= i + alignment(b).
int alignment(uint b) { return P.masking.x == 2u ? kv_length(b) - int(P.attn.x) : 0; }

RowMask row_mask(uint b, uint h, uint i) {
    RowMask m;
    int limit = kv_length(b);
    if (P.masking.x != 0u) limit = min(limit, int(i) + alignment(b) + 1);  // j <= i + a
    m.limit = uint(max(limit, 0));
    m.has_bool = P.masking.z != 0u;
    m.bool_base = tensor_index(P.tbool, b, h, i);
    m.bool_stride = P.tbool.stride.w;
    m.has_float = P.masking.w != 0u;
    m.float_base = tensor_index(P.tfloat, b, h, i);
    m.float_stride = P.tfloat.stride.w;
    return m;
}

bool key_visible(RowMask m, uint j) {
    if (j >= m.limit) return false;
    if (m.has_bool) {
        const uint byte_index = m.bool_base + j * m.bool_stride;
        if (((bool_words[byte_index >> 2] >> ((byte_index & 3u) * 8u)) & 0xffu) == 0u) return false;
    }
    return true;
}

float additive(RowMask m, uint j) { return m.has_float ? float_mask[m.float_base + j * m.float_stride] : 0.0; }

#endif

// The mask model, the GLSL twin of Problem::key_visible / Problem::additive
// (engine/attention/problem.hpp). Needs params.glsl and these bindings declared before inclusion:
//   kv_lengths[] (int), bool_words[] (uint, 4 mask bytes per word), float_mask[] (float).
#ifndef VKATTN_MASK_GLSL
#define VKATTN_MASK_GLSL

int kv_length(uint b) { return P.masking.y != 0u ? kv_lengths[b] : int(P.shape1.w); }

// The diagonal's offset: causal keeps key j for query i when j <= i + alignment(b).
int alignment(uint b) { return P.masking.x == 2u ? kv_length(b) - int(P.shape1.x) : 0; }

bool key_visible(uint b, uint h, uint i, uint j) {
    if (int(j) >= kv_length(b)) return false;
    if (P.masking.x != 0u && int(j) > int(i) + alignment(b)) return false;
    if (P.masking.z != 0u) {
        const uint byte_index = tensor_index(P.tbool, b, h, i) + j * P.tbool.stride.w;
        if (((bool_words[byte_index >> 2] >> ((byte_index & 3u) * 8u)) & 0xffu) == 0u) return false;
    }
    return true;
}

float additive(uint b, uint h, uint i, uint j) {
    if (P.masking.w == 0u) return 0.0;
    return float_mask[tensor_index(P.tfloat, b, h, i) + j * P.tfloat.stride.w];
}

#endif

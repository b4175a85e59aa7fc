// combine.comp's parameter block. Mirrored by CombineParams in engine/attention/params.hpp.
#ifndef VKATTN_COMBINE_PARAMS_GLSL
#define VKATTN_COMBINE_PARAMS_GLSL

#include "params.glsl"

layout(std140, set = 0, binding = 0) uniform CombineParams {
    AttentionShape shape;
    ChunkRange chunk;        // flash.comp's: units u = b·Hkv + hk (grid y); rows ρ = g·Nq + i (grid x)
    uint splits;             // partial results per row
    uint o_split_stride;     // elements between one split's partial O and the next's
    uint lse_split_stride;   // elements between one split's partial lse and the next's
    uint has_sinks;          // 1 when head_terms holds sink logits (MASK_SINKS), else 0
    TensorDesc partial_o;    // split 0's partial O (fp32, chunk-local)
    TensorDesc partial_lse;  // split 0's partial lse
    TensorDesc o;
    TensorDesc lse;
    Varlen varlen;           // flash.comp's: O and LSE packed by cu_seqlens_q
} P;

#endif

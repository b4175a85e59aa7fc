// flash.comp's parameter block. Mirrored by FlashParams in engine/attention/params.hpp.
#ifndef VKATTN_FLASH_PARAMS_GLSL
#define VKATTN_FLASH_PARAMS_GLSL

#include "params.glsl"

layout(std140, set = 0, binding = 0) uniform FlashParams {
    AttentionShape shape;
    ChunkRange chunk;        // units u = b·Hkv + hk (grid y); rows ρ = g·Nq + i over the group's query
                             // heads h = hk·group + g
    MaskParams mask;
    float scale;             // the softmax scale (natural-log units; the kernel folds log2(e) in)
    uint keys_per_split;     // SPLIT: split s holds keys [s·keys_per_split, (s + 1)·keys_per_split)
    uint first_split;        // SPLIT: the split of gl_WorkGroupID.z = 0 (splits are bound a few at a time)
    uint first_column;       // the first output column of this dispatch (wide heads take column passes)
    uint o_split_stride;     // SPLIT: elements between one split's partial O and the next's
    uint lse_split_stride;   // SPLIT: elements between one split's partial lse and the next's
    TensorDesc q;
    TensorDesc k;
    TensorDesc v;
    TensorDesc o;            // O, or in SPLIT mode split 0's partial O (fp32, chunk-local)
    TensorDesc lse;          // the row log-sum-exp, or in SPLIT mode split 0's partial
    PagedKv paged;           // PAGED: how k and v address the pools
    Varlen varlen;           // packed (variable-length) Q/O/LSE and K/V
} P;

#endif

// The backward kernels' parameter block (bwd_delta.comp, bwd_sinks.comp, bwd_mask.comp,
// bwd_scores.comp, flash_bwd_q.comp, flash_bwd_kv.comp). Mirrored by BackwardParams in engine/attention/params.hpp.
#ifndef VKATTN_BACKWARD_PARAMS_GLSL
#define VKATTN_BACKWARD_PARAMS_GLSL

#include "params.glsl"

layout(std140, set = 0, binding = 0) uniform BackwardParams {
    AttentionShape shape;
    MaskParams mask;
    float scale;          // the softmax scale (natural-log units)
    uint first_column;    // the first gradient column of this dispatch (wide heads take column passes)
    uint rows;            // bwd_delta: rows B·Hq·Nq
    uint first_unit;      // flash_bwd_*: the unit (b·Hkv + hk) of grid y = 0
    TensorDesc q;
    TensorDesc k;
    TensorDesc v;
    TensorDesc o;
    TensorDesc grad_out;  // dO, o's shape and dtype
    TensorDesc lse;       // the forward's row log-sum-exp, fp32 [B, Hq, Nq]
    TensorDesc delta;     // Δ = rowsum(dO ∘ o), fp32 [B, Hq, Nq]
    TensorDesc dq;
    TensorDesc dk;
    TensorDesc dv;
    uvec4 mask_shape;     // bwd_mask: the float mask's own shape, right-aligned to rank 4
    uvec4 mask_work;      // bwd_mask: (first broadcast index of this dispatch, how many, mask elements, 0)
    TensorDesc scores;    // bwd_scores: S and dP, f32, by (b, hk, query row)
    uvec4 scores_work;    // bwd_scores: (query head g of each unit's group, first row, 0, keys padded to 4)
} P;

#endif

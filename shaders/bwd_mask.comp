#version 450
// The float mask's gradient (an attention bias): d_float_mask[e] = Σ dL[b, h, i, j] over every
// (b, h, i, j) that element e of the mask broadcasts to, with dL = P·(κ·dP − Δ) the logit's gradient
// (the mask is added after the softcap: ∂logit/∂mask = 1; docs/SEMANTICS.md). One invocation per
// mask element recomputes its terms (S and dP as dot products, P from the saved lse): O(N²·D)
// work and no memory beyond the mask. A dispatch sums the broadcast indices
// [mask_work.x, mask_work.x + mask_work.y) in order and adds them to what earlier dispatches
// stored (the first one stores), so the sum's order is fixed and each dispatch's loops stay within
// lavapipe's budget: the same bits on every run.
#extension GL_EXT_control_flow_attributes : enable

#include "common/backward_params.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;

#define OL_NAME load_q4
#define OL_SLOT 1
#define OL_TYPE Q_TYPE
#include "common/operand_loader.glsl"
#define OL_NAME load_k4
#define OL_SLOT 2
#define OL_TYPE K_TYPE
#include "common/operand_loader.glsl"
#define OL_NAME load_v4
#define OL_SLOT 3
#define OL_TYPE V_TYPE
#include "common/operand_loader.glsl"
#define OL_NAME load_g4
#define OL_SLOT 10
#define OL_TYPE Q_TYPE
#include "common/operand_loader.glsl"

layout(std430, set = 0, binding = 4) buffer DMask { float d_mask[]; };
layout(std430, set = 0, binding = 5) readonly buffer Lse { float lse[]; };
layout(std430, set = 0, binding = 6) readonly buffer KvLengths { int kv_lengths[]; };
layout(std430, set = 0, binding = 7) readonly buffer BoolMask { uint bool_words[]; };
layout(std430, set = 0, binding = 8) readonly buffer FloatMask { float float_mask[]; };
layout(std430, set = 0, binding = 9) readonly buffer HeadTerms { float head_terms[]; };
layout(std430, set = 0, binding = 11) readonly buffer Delta { float delta[]; };

#include "common/mask.glsl"
#include "common/philox.glsl"

const float LOG2E = 1.4426950408889634;

void main() {
    const uint e = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (e >= P.mask_work.z) return;
    const uvec4 m = P.mask_shape;
    const uvec4 full = uvec4(P.shape.B, P.shape.Hq, P.shape.Nq, P.shape.Nkv);
    // The element's own coordinates (C order), and the dimensions it is broadcast over.
    const uvec4 own = uvec4(e / (m.w * m.z * m.y), (e / (m.w * m.z)) % m.y, (e / m.w) % m.z, e % m.w);
    const bvec4 broadcast = bvec4(m.x == 1u && full.x > 1u, m.y == 1u && full.y > 1u, m.z == 1u && full.z > 1u,
                                  m.w == 1u && full.w > 1u);
    const uvec4 extent = uvec4(broadcast.x ? full.x : 1u, broadcast.y ? full.y : 1u, broadcast.z ? full.z : 1u,
                               broadcast.w ? full.w : 1u);
    const uint total = extent.x * extent.y * extent.z * extent.w;
    const uint first = P.mask_work.x, last = min(total, first + P.mask_work.y);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const uint Dk = P.shape.Dk, Dv = P.shape.Dv;
    float sum = 0.0;
    for (uint r = first; r < last; ++r) {
        // r in mixed radix over the broadcast dimensions (j fastest).
        uvec4 at = own;
        uint rest = r;
        if (broadcast.w) { at.w = rest % extent.w; rest /= extent.w; }
        if (broadcast.z) { at.z = rest % extent.z; rest /= extent.z; }
        if (broadcast.y) { at.y = rest % extent.y; rest /= extent.y; }
        if (broadcast.x) at.x = rest;
        const uint b = at.x, h = at.y, i = at.z, j = at.w, hk = h / P.shape.group;
        const RowMask mask = row_mask(b, h, i);
        float terms;
        if (!key_terms(mask, j, terms)) continue;
        const uint q_row = tensor_index(P.q, b, h, i), g_row = tensor_index(P.grad_out, b, h, i);
        const uint k_row = tensor_index(P.k, b, hk, j), v_row = tensor_index(P.v, b, hk, j);
        vec4 s4 = vec4(0.0), dp4 = vec4(0.0);
        for (uint d = 0u; d < Dk; d += 4u) s4 += load_q4(q_row + d, Dk - d) * load_k4(k_row + d, Dk - d);
        for (uint d = 0u; d < Dv; d += 4u) dp4 += load_g4(g_row + d, Dv - d) * load_v4(v_row + d, Dv - d);
        const float scaled = ((s4.x + s4.y) + (s4.z + s4.w)) * P.scale;
        const float x = capped ? softcap(scaled) : scaled;
        const uint row = tensor_index(P.lse, b, h, i);
        const float p = exp2((x + terms - lse[row]) * LOG2E);
        float kappa = 1.0;
        if (dropout) kappa = dropout_keeps(b, h, i, j) ? P.mask.keep_scale : 0.0;
        sum += p * (kappa * ((dp4.x + dp4.y) + (dp4.z + dp4.w)) - delta[tensor_index(P.delta, b, h, i)]);
    }
    d_mask[e] = first == 0u ? sum : d_mask[e] + sum;
}

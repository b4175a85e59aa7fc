#version 450
// The backward pass's first kernel: Δ[b, h, i] = Σ_e dO[b, h, i, e] · o[b, h, i, e] (FlashAttention-2's
// D), one invocation per row, into a dense fp32 [B, Hq, Nq] scratch. Δ equals Σ_j P·dP over the row's
// keys with or without dropout and sinks (docs/SEMANTICS.md, "The backward pass"), so the kernels
// after it need no pass over the keys to get it. Rows are numbered b·Hq·Nq + h·Nq + i; a dispatch
// takes P.rows of them from the first of unit P.first_unit (unit b·Hkv + hk's rows are its group's
// heads' rows, in order), 64 per workgroup over a grid of gl_NumWorkGroups.x columns (the x
// dimension alone is capped at 65,535).
#extension GL_EXT_control_flow_attributes : enable

#include "common/backward_params.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint O_TYPE = 0;  // o's and dO's storage type (q's)

#define TL_NAME load_grad_out
#define TL_SLOT 1
#define TL_TYPE O_TYPE
#include "common/typed_load.glsl"
#define TL_NAME load_o
#define TL_SLOT 2
#define TL_TYPE O_TYPE
#include "common/typed_load.glsl"
layout(std430, set = 0, binding = 3) writeonly buffer Delta { float delta[]; };

void main() {
    const uint local = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (local >= P.rows) return;
    const uint Nq = P.shape.Nq, Hq = P.shape.Hq, Dv = P.shape.Dv;
    const uint row = P.first_unit * P.shape.group * Nq + local;  // the chunk's units' rows come in order
    const uint b = row / (Hq * Nq), h = (row / Nq) % Hq, i = row % Nq;
    const uint g_row = tensor_index(P.grad_out, b, h, i), o_row = tensor_index(P.o, b, h, i);
    vec4 sum = vec4(0.0);
    for (uint e = 0u; e < Dv; e += 4u) sum += load_grad_out(g_row + e, Dv - e) * load_o(o_row + e, Dv - e);
    delta[tensor_index(P.delta, b, h, i)] = (sum.x + sum.y) + (sum.z + sum.w);
}

#version 450
// The sinks' gradient: d_sinks[h] = −Σ_{b, i} e^(σ_h − lse[b, h, i]) · Δ[b, h, i] (the sink is one more
// softmax entry whose weight multiplies nothing; docs/SEMANTICS.md). One workgroup per query head,
// each invocation summing a fixed stride of rows, then a fixed-order reduction: the same bits on
// every run (no atomics). A head without a sink (σ = −∞) gets 0.
#include "common/backward_params.glsl"
#include "common/float_bits.glsl"

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 1) readonly buffer Lse { float lse[]; };
layout(std430, set = 0, binding = 2) readonly buffer Delta { float delta[]; };
layout(std430, set = 0, binding = 3) readonly buffer HeadTerms { float head_terms[]; };
layout(std430, set = 0, binding = 4) writeonly buffer DSinks { float d_sinks[]; };

shared float partial[64];

void main() {
    const uint h = gl_WorkGroupID.x, lane = gl_LocalInvocationID.x;
    const uint Nq = P.shape.Nq, rows = P.shape.B * Nq;
    const float sink = head_terms[P.shape.Hq + h];
    float sum = 0.0;
    // Nested so that no loop runs 65,535 times (lavapipe ends longer loops silently).
    if (!is_negative_infinity(sink))
        for (uint r0 = 0u; r0 < rows; r0 += 64u * 4096u)
            for (uint r = r0 + lane; r < min(rows, r0 + 64u * 4096u); r += 64u) {
                const uint b = r / Nq, i = r % Nq;
                sum -= exp(sink - lse[tensor_index(P.lse, b, h, i)]) * delta[tensor_index(P.delta, b, h, i)];
            }
    partial[lane] = sum;
    barrier();
    if (lane != 0u) return;
    float total = 0.0;
    for (uint l = 0u; l < 64u; ++l) total += partial[l];
    d_sinks[h] = total;
}

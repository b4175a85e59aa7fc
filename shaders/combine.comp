#version 450
// Split-KV, second kernel: merges the S partial results of one query row exactly.
// Each split s produced O_s (normalised by its own sum) and lse_s = m_s + log l_s, so
//   lse = log Σ_s e^(lse_s),   O = Σ_s e^(lse_s − lse) · O_s.
// Splits that saw no visible key have lse_s = MASKED (a finite sentinel: common/float_bits.glsl) and
// weigh nothing; if all do, O = 0, lse = −∞.
// The head's attention sink, left out of every split, joins the sum here exactly once:
//   lse = log(e^sink + Σ_s e^(lse_s)).
// Varlen: O and LSE rows are packed (common/varlen.glsl); rows past a sequence are not stored.

#extension GL_EXT_control_flow_attributes : enable
#include "common/combine_params.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
const uint COLUMNS = 8;     // output columns per invocation: Dv ≤ COLUMNS · WG = 512, the fused kernels' most
const uint CHUNK = 1024;    // splits whose weights are in shared memory at once
shared float weight[CHUNK];
#include "common/float_bits.glsl"

layout(std430, set = 0, binding = 1) readonly buffer PartialO { float partial_o[]; };
layout(std430, set = 0, binding = 2) readonly buffer PartialLse { float partial_lse[]; };
#define OUT_SLOT 3
#include "common/typed_store.glsl"
layout(std430, set = 0, binding = 4) writeonly buffer Lse { float lse[]; };
layout(std430, set = 0, binding = 5) readonly buffer HeadTerms { float head_terms[]; };  // [Hq] slopes, [Hq] sinks
layout(std430, set = 0, binding = 6) readonly buffer CuSeqlensQ { int cu_q[]; };
layout(std430, set = 0, binding = 7) readonly buffer CuSeqlensK { int cu_k[]; };
#include "common/varlen.glsl"

void main() {
    // The grid is flash.comp's: unit = (b, key/value head), row ρ = g·Nq + i of its query heads.
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.y;
    const uint b = unit / P.shape.Hkv, hk = unit % P.shape.Hkv;
    const uint rho = P.chunk.first_row + gl_WorkGroupID.x;
    const uint h = hk * P.shape.group + rho / P.shape.Nq, i = rho % P.shape.Nq;
    if (i >= q_length(b)) return;  // past a packed sequence (varlen): flash.comp computed nothing
    const uint row = q_base(b) + i;  // O's and LSE's row: packed (varlen) or i
    const uint splits = P.splits, Dv = P.shape.Dv;
    const uint lse_row = tensor_index(P.partial_lse, b, h, i), o_part = tensor_index(P.partial_o, b, h, i);

    // The sink, unless there is none or it is −∞ (by its bits).
    const float sink_value = P.has_sinks != 0u ? head_terms[P.shape.Hq + h] : 0.0;
    const bool has_sink = P.has_sinks != 0u && !is_negative_infinity(sink_value);
    float m = has_sink ? sink_value : MASKED;
    bool poisoned = false;  // a NaN partial (NaN or inf in q or k) makes the whole row NaN, as in one pass
    for (uint s = 0u; s < splits; ++s) {
        const float x = partial_lse[lse_row + s * P.lse_split_stride];
        poisoned = poisoned || is_nan(x);
        m = max(m, x);
    }
    const bool empty = !poisoned && m == MASKED;
    const bool weighs = !empty && !poisoned;
    // Each split's weight e^(lse_s − m), computed once per split (not once per column) into shared
    // memory, CHUNK splits at a time; every column then sums weight · O_s.
    float total = has_sink && weighs ? exp(sink_value - m) : 0.0;
    const uint o_row = tensor_index(P.o, b, h, row);
    float acc[COLUMNS];
    [[unroll]] for (uint c = 0u; c < COLUMNS; ++c) acc[c] = 0.0;
    for (uint s0 = 0u; s0 < splits; s0 += CHUNK) {
        const uint n = min(CHUNK, splits - s0);
        barrier();  // the previous chunk's weights are read
        for (uint s = gl_LocalInvocationID.x; s < n; s += WG) {
            const float x = partial_lse[lse_row + (s0 + s) * P.lse_split_stride];
            weight[s] = weighs && x != MASKED ? exp(x - m) : 0.0;
        }
        barrier();
        for (uint s = 0u; s < n; ++s) total += weight[s];  // the same order in every invocation
        if (weighs)
            for (uint s = 0u; s < n; ++s) {
                const float w = weight[s];
                const uint part = o_part + (s0 + s) * P.o_split_stride;
                [[unroll]] for (uint c = 0u; c < COLUMNS; ++c) {
                    const uint col = gl_LocalInvocationID.x + c * WG;
                    if (col < Dv && w != 0.0) acc[c] += w * partial_o[part + col];
                }
            }
    }
    const float inv = weighs ? 1.0 / total : 0.0;
    [[unroll]] for (uint c = 0u; c < COLUMNS; ++c) {
        const uint col = gl_LocalInvocationID.x + c * WG;
        if (col < Dv) store_out(o_row + col, poisoned ? quiet_nan() : acc[c] * inv);
    }
    if (gl_LocalInvocationID.x == 0u)
        lse[tensor_index(P.lse, b, h, row)] = poisoned ? quiet_nan() : empty ? negative_infinity() : m + log(total);
}

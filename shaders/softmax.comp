#version 450
// Stage 2: the masked, numerically stable softmax of one score row per workgroup, in place:
//   S[b,h,i,:] (scale already applied) -> P[b,h,i,:],  and the row's log-sum-exp.
// Pass 1 keeps an online (max, sum) pair per invocation,
//   m = max(m_old, x),   l = l_old·e^(m_old − m) + e^(x − m),
// then merges the pairs across the workgroup; pass 2 writes P = e^(x − m) / l.
// Logits follow mask.glsl (softcap, additive terms, masks); the head's sink logit joins (m, l) after
// the reduction, and dropout applies to the P written in pass 2 (lse stays the softmax's).
// Masked logits are MASKED (a finite sentinel, common/float_bits.glsl) and are skipped rather than
// exponentiated, so a row with no visible key keeps m = MASKED and yields P = 0 and lse = −∞ (or the
// sink) instead of 0/0 = NaN.
// With P.logits_stage, pass 2 also writes each logit at the stage asked for (AttentionOutputs::logits:
// scaled, softcapped, or masked with −∞ where a key is masked) to binding 8, beside P.
// When one row of S exceeds a binding, the row is handled a key slice at a time in two passes
// (SoftmaxParams::mode: MODE_STATS writes each slice's (m, l), MODE_APPLY merges them and writes P).
// Variants: SUBGROUP_OPS (define) merges with subgroupMax/subgroupAdd, then one slot per subgroup;
// otherwise a shared-memory tree (WG must be a power of two).
#ifdef SUBGROUP_OPS
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#include "common/softmax_params.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
const uint CHUNK = 8192u;  // lavapipe ends loops after 65,535 iterations: nest long loops

layout(std430, set = 0, binding = 1) buffer Scores { float scores[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Lse { float lse[]; };
layout(std430, set = 0, binding = 3) readonly buffer KvLengths { int kv_lengths[]; };
layout(std430, set = 0, binding = 4) readonly buffer BoolMask { uint bool_words[]; };
layout(std430, set = 0, binding = 5) readonly buffer FloatMask { float float_mask[]; };
layout(std430, set = 0, binding = 6) readonly buffer HeadTerms { float head_terms[]; };
layout(std430, set = 0, binding = 7) buffer Stats { float stats[]; };  // (m, l) per row and key slice
layout(std430, set = 0, binding = 8) writeonly buffer Logits { float logits[]; };

#include "common/mask.glsl"
#include "common/philox.glsl"

shared float shared_m[WG];
shared float shared_l[WG];
// Set when a logit is NaN (NaN or inf in q or k): max() may drop a NaN, so it is tracked apart and
// makes the whole row NaN, P and lse, as in the reference.
shared bool row_poisoned;

// Merges two (max, sum) pairs; an empty pair has m = MASKED and l = 0.
void merge(inout float m, inout float l, float m2, float l2) {
    const float mm = max(m, m2);
    if (mm == MASKED) return;  // both empty
    l = (m == MASKED ? 0.0 : l * exp(m - mm)) + (m2 == MASKED ? 0.0 : l2 * exp(m2 - mm));
    m = mm;
}

float logit(RowMask mask, uint j, uint row) {
    float terms;
    if (!key_terms(mask, j, terms)) return MASKED;
    return softcap(scores[row + j]) + terms;
}

// The logit of key j at P.logits_stage, given its masked logit x (MASKED where masked).
float staged_logit(float x, uint j, uint row) {
    if (P.logits_stage == LOGITS_SCALED) return scores[row + j];
    if (P.logits_stage == LOGITS_SOFTCAPPED) return softcap(scores[row + j]);
    return x == MASKED ? negative_infinity() : x;
}

// This workgroup's (m, l) over keys [k0, k1), merged across the workgroup; NaN m when a logit was NaN.
void row_stats(RowMask mask, uint row, uint k0, uint k1, out float m_out, out float l_out) {
    const uint tid = gl_LocalInvocationID.x;
    if (tid == 0u) row_poisoned = false;
    barrier();
    float m = MASKED, l = 0.0;
    for (uint j0 = k0; j0 < k1; j0 += CHUNK * WG)
        for (uint j = j0 + tid; j < min(k1, j0 + CHUNK * WG); j += WG) {
            const float x = logit(mask, j, row);
            if (is_nan(x)) row_poisoned = true;  // every writer stores the same value
            if (x == MASKED) continue;
            if (x > m) {
                l = (m == MASKED ? 0.0 : l * exp(m - x)) + 1.0;
                m = x;
            } else {
                l += exp(x - m);  // NaN scores propagate, as in the reference
            }
        }

#ifdef SUBGROUP_OPS
    const float sm = subgroupMax(m);
    const float sl = subgroupAdd(m == MASKED ? 0.0 : l * exp(m - sm));
    if (subgroupElect()) {
        shared_m[gl_SubgroupID] = sm;
        shared_l[gl_SubgroupID] = sl;
    }
    barrier();
    m = MASKED;
    l = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; ++s) merge(m, l, shared_m[s], shared_l[s]);
#else
    shared_m[tid] = m;
    shared_l[tid] = l;
    barrier();
    for (uint half_width = WG / 2u; half_width > 0u; half_width /= 2u) {
        if (tid < half_width) {
            float mm = shared_m[tid], ll = shared_l[tid];
            merge(mm, ll, shared_m[tid + half_width], shared_l[tid + half_width]);
            shared_m[tid] = mm;
            shared_l[tid] = ll;
        }
        barrier();
    }
    m = shared_m[0];
    l = shared_l[0];
#endif
    if (row_poisoned) m = quiet_nan();  // read after the reductions' barriers
    m_out = m;
    l_out = l;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.y;
    const uint b = unit / P.shape.Hq, h = unit % P.shape.Hq;
    const uint i = P.chunk.first_row + gl_WorkGroupID.x;
    const uint row = tensor_index(P.scores, b, h, i);
    const RowMask mask = row_mask(b, h, i);
    // This dispatch's keys [k0, k1). MODE_WHOLE: whole rows (k0 = 0, k1 = Nkv).
    // When one row of S exceeds a binding, S is bound a key slice at a time: MODE_STATS writes the
    // slice's (m, l) to `stats` (slice P.slice of P.slices), MODE_APPLY merges every slice's in order
    // and writes the slice's P (and, for slice 0, the lse).
    const uint mode = P.mode, k0 = P.key_begin, k1 = P.key_end;
    const uint slices = P.slices, slice = P.slice;
    const uint stats_row = ((unit - P.chunk.first_unit) * P.chunk.rows + (i - P.chunk.first_row)) * slices;

    float m, l;
    if (mode == MODE_APPLY) {
        m = MASKED;
        l = 0.0;
        bool poisoned = false;
        for (uint s = 0u; s < slices; ++s) {
            const float ms = stats[2u * (stats_row + s)];
            poisoned = poisoned || is_nan(ms);
            if (!is_nan(ms)) merge(m, l, ms, stats[2u * (stats_row + s) + 1u]);
        }
        if (poisoned) m = quiet_nan();
    } else {
        row_stats(mask, row, k0, k1, m, l);
        if (mode == MODE_STATS) {
            if (tid == 0u) {
                stats[2u * (stats_row + slice)] = m;
                stats[2u * (stats_row + slice) + 1u] = l;
            }
            return;
        }
    }

    const bool poisoned = is_nan(m);
    float sink;
    if (!poisoned && sink_logit(h, sink)) merge(m, l, sink, 1.0);

    const float inv_l = m == MASKED || poisoned ? 0.0 : 1.0 / l;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float keep_scale = P.mask.keep_scale;
    const bool with_logits = P.logits_stage != LOGITS_NONE;
    const uint logits_row = tensor_index(P.logits, b, h, i);
    for (uint j0 = k0; j0 < k1; j0 += CHUNK * WG)
        for (uint j = j0 + tid; j < min(k1, j0 + CHUNK * WG); j += WG) {
            const float x = logit(mask, j, row);
            if (with_logits) logits[logits_row + j] = staged_logit(x, j, row);  // before P overwrites S
            float p = x == MASKED ? 0.0 : exp(x - m) * inv_l;
            if (dropout) p = dropout_keeps(b, h, i, j) ? p * keep_scale : 0.0;
            scores[row + j] = poisoned ? quiet_nan() : p;
        }
    if (tid == 0u && (mode == MODE_WHOLE || slice == 0u))
        lse[tensor_index(P.lse, b, h, i)] = poisoned ? quiet_nan() : m == MASKED ? negative_infinity() : m + log(l);
}

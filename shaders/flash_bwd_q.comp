#version 450
// The backward pass's dQ (FlashAttention-2's backward, the query side): flash.comp's layout with the
// forward's saved log-sum-exp in place of the online maximum. Per key block:
//   S  = Q·Kᵀ (R×KL scores per lane),  P = exp(logit(S) − lse)  (mask.glsl's logit rules),
//   dP = dO·Vᵀ (a second score product),  dS = P ∘ (κ·dP − Δ) ∘ softcap'   (κ: dropout's factor),
//   dQ += dS·K, as the forward's P·V: each key's dS shuffled from the lane that owns it, K's row read
//   at this lane's columns.
// scale·dQ is stored once at the end. Every output element has one writer: no atomics, the same bits
// on every run. Work layout as flash.comp (streamed): workgroup = NSG subgroups of SG lanes; unit =
// (b, hk), rows ρ = g·Nq + i over the group's query heads; subgroup owns R rows, lanes own KL keys
// of each block of KB = SG·KL; lane λ owns dQ columns first_column + 4·(λ + SG·t), t < C4 (wide heads
// take column passes, each recomputing S and dP). Blocks outside every row's key range are never
// visited (causal costs about half, a window N·W). Reads through common/operand_loader.glsl (float
// texel views, words through R32_UINT views, or words from storage buffers: f32, f16, bf16); dQ stored as q's type.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/backward_params.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint SG = 8;      // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint R = 8;       // query rows per subgroup
layout(constant_id = 3) const uint KL = 8;      // keys per lane per block
layout(constant_id = 4) const uint C4 = 2;      // dQ vec4 slots per lane per pass
layout(constant_id = 6) const uint NSG = 8;     // subgroups per workgroup
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;
const uint KB = SG * KL;
const float LOG2E = 1.4426950408889634;

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

#define TS_NAME store_dq
#define TS_SLOT 4
#if defined(DQ_BF16)
#define TS_BF16
#elif defined(DQ_F16)
#define TS_F16
#endif
#include "common/typed_store.glsl"
layout(std430, set = 0, binding = 5) readonly buffer Lse { float lse[]; };
layout(std430, set = 0, binding = 6) readonly buffer KvLengths { int kv_lengths[]; };
layout(std430, set = 0, binding = 7) readonly buffer BoolMask { uint bool_words[]; };
layout(std430, set = 0, binding = 8) readonly buffer FloatMask { float float_mask[]; };
layout(std430, set = 0, binding = 9) readonly buffer HeadTerms { float head_terms[]; };
layout(std430, set = 0, binding = 11) readonly buffer Delta { float delta[]; };

#include "common/mask.glsl"
#include "common/philox.glsl"

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    const uint Hkv = P.shape.Hkv, group = P.shape.group, Nq = P.shape.Nq, Nkv = P.shape.Nkv;
    const uint Dk = P.shape.Dk, Dv = P.shape.Dv;
    const uint unit = P.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    const uint rows_end = group * Nq;
    const uint rho0 = (gl_WorkGroupID.x * NSG + sg) * R;
    if (rho0 >= rows_end) return;  // uniform per subgroup

    // Rows: ρ -> (h, i); rows past the unit repeat its last row and are not stored.
    uint q_row[R], g_row[R], first[R], limit[R];
    float lse_row[R], delta_row[R];
    uint lo_first = 0xffffffffu, hi_first = 0u, lo_limit = 0xffffffffu, hi_limit = 0u;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint rho = min(rho0 + r, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        q_row[r] = tensor_index(P.q, b, h, i);
        g_row[r] = tensor_index(P.grad_out, b, h, i);
        lse_row[r] = lse[tensor_index(P.lse, b, h, i)];
        delta_row[r] = delta[tensor_index(P.delta, b, h, i)];
        const RowMask mask = row_mask(b, h, i);
        first[r] = mask.first;
        limit[r] = min(mask.limit, Nkv);
        lo_first = min(lo_first, first[r]);
        hi_first = max(hi_first, first[r]);
        lo_limit = min(lo_limit, limit[r]);
        hi_limit = max(hi_limit, limit[r]);
    }
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float scale = P.scale, keep_scale = P.mask.keep_scale;
    const uint k_begin = lo_first, k_end = min(hi_limit, Nkv);
    const uint key_last = max(k_end, 1u) - 1u;
    const uint k_head = tensor_index(P.k, b, hk, 0u), k_stride = P.k.stride.z;
    const uint v_head = tensor_index(P.v, b, hk, 0u), v_stride = P.v.stride.z;
    const uint Dk4 = (Dk + 3u) / 4u, Dv4 = (Dv + 3u) / 4u;

    uint col[C4];
    [[unroll]] for (uint t = 0u; t < C4; ++t) {
        const uint c = P.first_column + 4u * (lane + SG * t);
        col[t] = c < Dk ? c : 0u;  // past Dk: read column 0, store nothing
    }
    vec4 dq[R][C4];
    [[unroll]] for (uint r = 0u; r < R; ++r)
        [[unroll]] for (uint t = 0u; t < C4; ++t) dq[r][t] = vec4(0.0);

    // Blocks of KB keys; the outer loop keeps every trip count far below lavapipe's 65,535.
    for (uint kb0 = k_begin; kb0 < k_end; kb0 += 4096u * KB)
    for (uint kb = kb0; kb < min(k_end, kb0 + 4096u * KB); kb += KB) {
        float s[R][KL], dp[R][KL];
        uint k_row[KL], v_row[KL];
        [[unroll]] for (uint c = 0u; c < KL; ++c) {
            const uint key = min(kb + lane * KL + c, key_last);
            k_row[c] = k_head + key * k_stride;
            v_row[c] = v_head + key * v_stride;
            [[unroll]] for (uint r = 0u; r < R; ++r) s[r][c] = dp[r][c] = 0.0;
        }
        for (uint d4 = 0u; d4 < Dk4; ++d4) {
            const uint valid = Dk - 4u * d4;
            vec4 kv[KL];
            [[unroll]] for (uint c = 0u; c < KL; ++c) kv[c] = load_k4(k_row[c] + 4u * d4, valid);
            [[unroll]] for (uint r = 0u; r < R; ++r) {
                const vec4 qv = load_q4(q_row[r] + 4u * d4, valid);
                [[unroll]] for (uint c = 0u; c < KL; ++c) s[r][c] += dot(qv, kv[c]);
            }
        }
        for (uint e4 = 0u; e4 < Dv4; ++e4) {
            const uint valid = Dv - 4u * e4;
            vec4 vv[KL];
            [[unroll]] for (uint c = 0u; c < KL; ++c) vv[c] = load_v4(v_row[c] + 4u * e4, valid);
            [[unroll]] for (uint r = 0u; r < R; ++r) {
                const vec4 gv = load_g4(g_row[r] + 4u * e4, valid);
                [[unroll]] for (uint c = 0u; c < KL; ++c) dp[r][c] += dot(gv, vv[c]);
            }
        }

        // dS per score, in s. Inside every row's range with no bool/float mask or ALiBi, no per-score
        // test; on the range's edge one compare; with them the full mask model.
        const bool whole = !elementwise && kb >= hi_first && kb + KB <= lo_limit;
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            const uint rho = min(rho0 + r, rows_end - 1u);
            const uint h = hk * group + rho / Nq, i = rho % Nq;
            RowMask mask;
            if (elementwise) mask = row_mask(b, h, i);
            [[unroll]] for (uint c = 0u; c < KL; ++c) {
                const uint key = kb + lane * KL + c;
                const float scaled = s[r][c] * scale;
                const float x = capped ? softcap(scaled) : scaled;
                float terms = 0.0;
                bool visible;
                if (elementwise) visible = key < Nkv && key_terms(mask, key, terms);
                else visible = whole || (key >= first[r] && key < limit[r]);
                const float p = visible ? exp2((x + terms - lse_row[r]) * LOG2E) : 0.0;
                float dpk = dp[r][c];
                if (dropout) dpk = dropout_keeps(b, h, i, key) ? dpk * keep_scale : 0.0;
                float ds = p * (dpk - delta_row[r]);
                if (capped) {
                    const float t = x * P.mask.inv_softcap;  // tanh(scaled / c)
                    ds *= 1.0 - t * t;
                }
                s[r][c] = ds;
            }
        }

        // dQ += dS·K: every key of the block, its dS shuffled from its owner lane.
        [[dont_unroll]] for (uint owner = 0u; owner < SG; ++owner)
            [[unroll]] for (uint c = 0u; c < KL; ++c) {
                const uint k_owner = k_head + min(kb + owner * KL + c, key_last) * k_stride;
                float ds[R];
                [[unroll]] for (uint r = 0u; r < R; ++r) ds[r] = subgroupShuffle(s[r][c], owner);
                [[unroll]] for (uint t = 0u; t < C4; ++t) {
                    const vec4 kc = load_k4(k_owner + col[t], Dk - col[t]);
                    [[unroll]] for (uint r = 0u; r < R; ++r) dq[r][t] += ds[r] * kc;
                }
            }
    }

    [[unroll]] for (uint r = 0u; r < R; ++r) {
        if (rho0 + r >= rows_end) continue;
        const uint rho = rho0 + r;
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        const uint dq_row = tensor_index(P.dq, b, h, i);
        const bool loud = gl_SubgroupSize != SG;  // another subgroup size computed garbage: say so
        [[unroll]] for (uint t = 0u; t < C4; ++t) {
            const uint c0 = P.first_column + 4u * (lane + SG * t);
            [[unroll]] for (uint c = 0u; c < 4u; ++c)
                if (c0 + c < Dk) store_dq(dq_row + c0 + c, loud ? quiet_nan() : dq[r][t][c] * scale);
        }
    }
}

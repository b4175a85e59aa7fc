#version 450
// The backward pass's dK and dV (FlashAttention-2's backward, the key side): flash.comp's layout
// turned around. A subgroup owns R keys (its "rows"); lanes own QL query rows of each block of
// QB = SG·QL queries (the forward's keys). Per query block, for each query head of the K/V head's
// group:
//   Sᵀ = K·Qᵀ (R×QL per lane),  Pᵀ = exp(logit(Sᵀ) − lse)   (mask.glsl's rules, per query row),
//   dPᵀ = V·dOᵀ,  Wᵀ = κ·Pᵀ,  dSᵀ = Pᵀ ∘ (κ·dPᵀ − Δ) ∘ softcap'   (κ: dropout's factor),
//   dV += Wᵀ·dO and dK += dSᵀ·Q, as the forward's P·V: each query's weight and dS shuffled from the
//   lane that owns it, its dO and Q rows read at this lane's columns.
// The group's query heads are summed in registers in a fixed order (GQA/MQA): no atomics, the same
// bits on every run. Queries outside query_range() of the subgroup's keys are never visited (causal
// costs about half). Lane λ owns dK and dV columns first_column + 4·(λ + SG·t), t < C4 (wide heads
// take column passes). Reads through common/operand_loader.glsl; dK and dV stored as k's and v's types.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/backward_params.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint SG = 8;      // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint R = 8;       // keys per subgroup
layout(constant_id = 3) const uint QL = 8;      // query rows per lane per block
layout(constant_id = 4) const uint C4 = 2;      // dK/dV vec4 slots per lane per pass
layout(constant_id = 6) const uint NSG = 8;     // subgroups per workgroup
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;
const uint QB = SG * QL;
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

#define TS_NAME store_dk
#define TS_SLOT 4
#if defined(DK_BF16)
#define TS_BF16
#elif defined(DK_F16)
#define TS_F16
#endif
#include "common/typed_store.glsl"
#define TS_NAME store_dv
#define TS_SLOT 12
#if defined(DV_BF16)
#define TS_BF16
#elif defined(DV_F16)
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
    const uint key0 = (gl_WorkGroupID.x * NSG + sg) * R;
    if (key0 >= Nkv) return;  // uniform per subgroup
    const uint key_end = min(key0 + R, Nkv);

    uint k_row[R], v_row[R];
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint key = min(key0 + r, Nkv - 1u);
        k_row[r] = tensor_index(P.k, b, hk, key);
        v_row[r] = tensor_index(P.v, b, hk, key);
    }
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float keep_scale = P.mask.keep_scale;
    const uint Dk4 = (Dk + 3u) / 4u, Dv4 = (Dv + 3u) / 4u;
    // The queries that may see these keys (the same for every head of the batch).
    const uvec2 queries = query_range(b, key0, key_end);

    uint kcol[C4], vcol[C4];
    [[unroll]] for (uint t = 0u; t < C4; ++t) {
        const uint c = P.first_column + 4u * (lane + SG * t);
        kcol[t] = c < Dk ? c : 0u;  // past the head: read column 0, store nothing
        vcol[t] = c < Dv ? c : 0u;
    }
    vec4 dk[R][C4], dv[R][C4];
    [[unroll]] for (uint r = 0u; r < R; ++r)
        [[unroll]] for (uint t = 0u; t < C4; ++t) dk[r][t] = dv[r][t] = vec4(0.0);

    for (uint g = 0u; g < group; ++g) {
        const uint h = hk * group + g;
        // Blocks of QB queries; the outer loop keeps every trip count far below lavapipe's 65,535.
        for (uint qb0 = queries.x; qb0 < queries.y; qb0 += 4096u * QB)
        for (uint qb = qb0; qb < min(queries.y, qb0 + 4096u * QB); qb += QB) {
            uint q_row[QL], g_row[QL];
            float w[R][QL], ds[R][QL];
            [[unroll]] for (uint c = 0u; c < QL; ++c) {
                const uint i = min(qb + lane * QL + c, queries.y - 1u);
                q_row[c] = tensor_index(P.q, b, h, i);
                g_row[c] = tensor_index(P.grad_out, b, h, i);
                [[unroll]] for (uint r = 0u; r < R; ++r) w[r][c] = ds[r][c] = 0.0;
            }
            // Sᵀ into w, dPᵀ into ds, then both replaced by the weights and dS.
            for (uint d4 = 0u; d4 < Dk4; ++d4) {
                const uint valid = Dk - 4u * d4;
                vec4 qv[QL];
                [[unroll]] for (uint c = 0u; c < QL; ++c) qv[c] = load_q4(q_row[c] + 4u * d4, valid);
                [[unroll]] for (uint r = 0u; r < R; ++r) {
                    const vec4 kv = load_k4(k_row[r] + 4u * d4, valid);
                    [[unroll]] for (uint c = 0u; c < QL; ++c) w[r][c] += dot(kv, qv[c]);
                }
            }
            for (uint e4 = 0u; e4 < Dv4; ++e4) {
                const uint valid = Dv - 4u * e4;
                vec4 gv[QL];
                [[unroll]] for (uint c = 0u; c < QL; ++c) gv[c] = load_g4(g_row[c] + 4u * e4, valid);
                [[unroll]] for (uint r = 0u; r < R; ++r) {
                    const vec4 vv = load_v4(v_row[r] + 4u * e4, valid);
                    [[unroll]] for (uint c = 0u; c < QL; ++c) ds[r][c] += dot(vv, gv[c]);
                }
            }
            [[unroll]] for (uint c = 0u; c < QL; ++c) {
                const uint i = qb + lane * QL + c;
                const uint ic = min(i, queries.y - 1u);
                const RowMask mask = row_mask(b, h, ic);
                const float lse_i = lse[tensor_index(P.lse, b, h, ic)];
                const float delta_i = delta[tensor_index(P.delta, b, h, ic)];
                [[unroll]] for (uint r = 0u; r < R; ++r) {
                    const uint key = key0 + r;
                    const float scaled = w[r][c] * P.scale;
                    const float x = capped ? softcap(scaled) : scaled;
                    float terms = 0.0;
                    bool visible = i < queries.y && key < key_end;
                    if (elementwise) visible = visible && key_terms(mask, key, terms);
                    else visible = visible && key >= mask.first && key < mask.limit;
                    const float p = visible ? exp2((x + terms - lse_i) * LOG2E) : 0.0;
                    float kappa = 1.0;
                    if (dropout) kappa = dropout_keeps(b, h, ic, key) ? keep_scale : 0.0;
                    float d = p * (kappa * ds[r][c] - delta_i);
                    if (capped) {
                        const float t = x * P.mask.inv_softcap;  // tanh(scaled / c)
                        d *= 1.0 - t * t;
                    }
                    w[r][c] = p * kappa;
                    ds[r][c] = d;
                }
            }
            // dV += Wᵀ·dO, dK += dSᵀ·Q: every query of the block, shuffled from its owner lane.
            [[dont_unroll]] for (uint owner = 0u; owner < SG; ++owner)
                [[unroll]] for (uint c = 0u; c < QL; ++c) {
                    const uint q_owner = subgroupShuffle(q_row[c], owner), g_owner = subgroupShuffle(g_row[c], owner);
                    float wr[R], dr[R];
                    [[unroll]] for (uint r = 0u; r < R; ++r) {
                        wr[r] = subgroupShuffle(w[r][c], owner);
                        dr[r] = subgroupShuffle(ds[r][c], owner);
                    }
                    [[unroll]] for (uint t = 0u; t < C4; ++t) {
                        const vec4 gc = load_g4(g_owner + vcol[t], Dv - vcol[t]);
                        const vec4 qc = load_q4(q_owner + kcol[t], Dk - kcol[t]);
                        [[unroll]] for (uint r = 0u; r < R; ++r) {
                            dv[r][t] += wr[r] * gc;
                            dk[r][t] += dr[r] * qc;
                        }
                    }
                }
        }
    }

    const bool loud = gl_SubgroupSize != SG;  // another subgroup size computed garbage: say so
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint key = key0 + r;
        if (key >= Nkv) continue;
        const uint dk_row = tensor_index(P.dk, b, hk, key), dv_row = tensor_index(P.dv, b, hk, key);
        [[unroll]] for (uint t = 0u; t < C4; ++t) {
            const uint c0 = P.first_column + 4u * (lane + SG * t);
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                if (c0 + c < Dk) store_dk(dk_row + c0 + c, loud ? quiet_nan() : dk[r][t][c] * P.scale);
                if (c0 + c < Dv) store_dv(dv_row + c0 + c, loud ? quiet_nan() : dv[r][t][c]);
            }
        }
    }
}

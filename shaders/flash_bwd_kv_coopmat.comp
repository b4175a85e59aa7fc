#version 450
// The backward pass's dK and dV on cooperative 16 × 16 × 16 matrices (issue #33): flash_bwd_kv.comp's
// contract (its bindings, parameters, mask and feature rules; the group's query heads summed in a
// fixed order, no atomics: the same bits on every run) with its products on common/coopmat.glsl.
// Per query head of the K/V head's group and query tile of BR queries:
//   Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ as products (Q, then dO, staged as f16 in one tile),
//   Pᵀ = exp(logit(Sᵀ) − lse), Wᵀ = κ·Pᵀ, dSᵀ = Pᵀ ∘ (κ·dPᵀ − Δ) ∘ softcap'   (per element),
//   dV += Wᵀ·dO with dO still staged, then dK += dSᵀ·Q with Q staged again (W and dS as f16).
// Work layout: workgroup = NSG subgroups of SG lanes, each owning 16 keys with their K (DKT) and V
// (DVT) as operands in registers and their dK and dV columns first_column + 16·t (t < OT) as
// accumulators. Queries outside query_range() of the workgroup's keys are never visited. Reads words
// through common/operand_loader.glsl (f32, f16, bf16); dK (times the scale) and dV stored as k's and
// v's types. Operands f16, or bf16 where CM_BF16 is defined (what this file says of f16 holds for
// them). A subgroup layout other than the pipeline's writes NaN.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/backward_params.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint CM_SG = 32;  // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint BR = 64;     // queries per tile, a multiple of 16
layout(constant_id = 3) const uint DKT = 8;     // Q's and K's 16-dimension tiles: ceil(Dk / 16)
layout(constant_id = 4) const uint OT = 8;      // dK's and dV's 16-column tiles per pass
layout(constant_id = 5) const uint DVT = 8;     // dO's and V's 16-dimension tiles: ceil(Dv / 16)
layout(constant_id = 6) const uint NSG = 4;     // subgroups per workgroup
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;

#include "common/coopmat.glsl"

const uint SG = CM_SG;
const uint BK = 16u * NSG;                      // keys per workgroup
const uint QT = BR / 16u;
const uint DKP = 16u * DKT, DVP = 16u * DVT;
const uint WG = NSG * SG;
const uint SLANES = SG >= 16u ? SG / 16u : 1u;  // lanes per key row for the elementwise step
const uint SROWS = SG >= 16u ? 1u : 16u / SG;   // key rows per lane
const uint SQ = BR / SLANES;                    // a lane's queries of a key row
const uint SCOLS = 16u / SLANES;
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

// One Q or dO tile (and K's, then V's rows at the start); per subgroup fp32 Sᵀ and dPᵀ tiles and
// the f16 Wᵀ and dSᵀ tiles, all [key][query].
const uint T_ROWS = BR > BK ? BR : BK;
const uint PITCH_T = (DKP > DVP ? DKP : DVP) + 8u;
const uint PITCH_S = BR + 4u, PITCH_P = BR + 8u;
CM_OPERAND_TILE(t_tile, T_ROWS * PITCH_T);
CM_ACC_TILE_SCALAR(s_tile, NSG * 16u * PITCH_S);   // Sᵀ, then dK's and dV's tiles at the end
CM_ACC_TILE_SCALAR(dp_tile, NSG * 16u * PITCH_S);
CM_OPERAND_TILE_SCALAR(w_tile, NSG * 16u * PITCH_P);
CM_OPERAND_TILE_SCALAR(ds_tile, NSG * 16u * PITCH_P);
// The query tile's per-query terms (lse, Δ, the row mask's key range), staged with Q once per tile.
// Until session 30 every lane read lse and Δ from their buffers and rebuilt the query's row mask
// (kv_lengths among its reads) at each query of its elementwise loop, loads the loop waited on.
shared float tile_lse[BR], tile_delta[BR];
shared uint tile_first[BR], tile_limit[BR];

// The query rows [i0, i0 + BR) of head h into t_tile: q's (dO = false) or dO's.
void stage_rows(uint b, uint h, uint i0, uint i_end, bool d_out) {
    const uint D = d_out ? P.shape.Dv : P.shape.Dk, DP = d_out ? DVP : DKP;
    for (uint e = gl_LocalInvocationIndex; e < BR * DP / 8u; e += WG) {
        const uint row = e / (DP / 8u), d = 8u * (e % (DP / 8u));
        const uint i = min(i0 + row, i_end - 1u);
        CM_ELEM4 lo, hi;
        if (d_out) {
            const uint at = tensor_index(P.grad_out, b, h, i) + d;
            CM_FETCH8(load_g4, at, d, D, lo, hi);
        } else {
            const uint at = tensor_index(P.q, b, h, i) + d;
            CM_FETCH8(load_q4, at, d, D, lo, hi);
        }
        CM_PUT8(t_tile, row * PITCH_T + d, lo, hi);
    }
}

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, inv = gl_LocalInvocationIndex;
    const uint part = lane % SLANES;
    const uint Hkv = P.shape.Hkv, group = P.shape.group, Nkv = P.shape.Nkv;
    const uint Dk = P.shape.Dk, Dv = P.shape.Dv;
    const uint unit = P.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    const uint wg_key0 = gl_WorkGroupID.x * BK, wg_key_end = min(wg_key0 + BK, Nkv);
    const uint key0 = wg_key0 + sg * 16u;  // this subgroup's first key
    const uint s_base = sg * 16u * PITCH_S, p_base = sg * 16u * PITCH_P;

    // K's rows, then V's, through the tile into registers.
    for (uint e = inv; e < BK * DKP / 8u; e += WG) {
        const uint row = e / (DKP / 8u), d = 8u * (e % (DKP / 8u));
        const uint at = tensor_index(P.k, b, hk, min(wg_key0 + row, Nkv - 1u)) + d;
        CM_ELEM4 lo, hi;
        CM_FETCH8(load_k4, at, d, Dk, lo, hi);
        CM_PUT8(t_tile, row * PITCH_T + d, lo, hi);
    }
    barrier();
    CmA k_ops[DKT];
    CM_LOOP for (uint dt = 0u; dt < DKT; ++dt) CM_LOAD_A(k_ops[dt], t_tile, sg * 16u * PITCH_T + 16u * dt, PITCH_T);
    barrier();
    for (uint e = inv; e < BK * DVP / 8u; e += WG) {
        const uint row = e / (DVP / 8u), d = 8u * (e % (DVP / 8u));
        const uint at = tensor_index(P.v, b, hk, min(wg_key0 + row, Nkv - 1u)) + d;
        CM_ELEM4 lo, hi;
        CM_FETCH8(load_v4, at, d, Dv, lo, hi);
        CM_PUT8(t_tile, row * PITCH_T + d, lo, hi);
    }
    barrier();
    CmA v_ops[DVT];
    CM_LOOP for (uint vt = 0u; vt < DVT; ++vt) CM_LOAD_A(v_ops[vt], t_tile, sg * 16u * PITCH_T + 16u * vt, PITCH_T);

    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float keep_scale = P.mask.keep_scale;
    const uint col_base = P.first_column;
    // The queries that may see the workgroup's keys (the same for every head of the batch).
    const uvec2 queries = query_range(b, wg_key0, max(wg_key_end, wg_key0 + 1u));

    CmAcc dk[OT];
    CmAcc dv[OT];
    CM_LOOP for (uint ot = 0u; ot < OT; ++ot) {
        CM_FILL(dk[ot], 0.0);
        CM_FILL(dv[ot], 0.0);
    }

    for (uint g = 0u; g < group; ++g) {
        const uint h = hk * group + g;
        for (uint qb0 = queries.x; qb0 < queries.y; qb0 += 4096u * BR)
        for (uint qb = qb0; qb < min(queries.y, qb0 + 4096u * BR); qb += BR) {
            // Sᵀ = K·Qᵀ.
            barrier();  // every subgroup is done with the previous tile's Q and terms (and the start's staging)
            stage_rows(b, h, qb, queries.y, false);
            for (uint e = inv; e < BR; e += WG) {
                const uint ic = min(qb + e, queries.y - 1u);
                const RowMask mask = row_mask(b, h, ic);
                tile_lse[e] = lse[tensor_index(P.lse, b, h, ic)];
                tile_delta[e] = delta[tensor_index(P.delta, b, h, ic)];
                tile_first[e] = mask.first;
                tile_limit[e] = mask.limit;
            }
            barrier();
            CM_LOOP for (uint qt = 0u; qt < QT; ++qt) {
                CmAcc acc;
                CM_FILL(acc, 0.0);
                CM_LOOP for (uint dt = 0u; dt < DKT; ++dt) {
                    CmB q_op;
                    CM_LOAD_BT(q_op, t_tile, 16u * qt * PITCH_T + 16u * dt, PITCH_T);
                    CM_MUL_ADD(acc, k_ops[dt], q_op, t_tile);
                }
                CM_STORE(acc, s_tile, s_base + 16u * qt, PITCH_S);
            }
            // dPᵀ = V·dOᵀ, dO staged where Q was.
            barrier();
            stage_rows(b, h, qb, queries.y, true);
            barrier();
            CM_LOOP for (uint qt = 0u; qt < QT; ++qt) {
                CmAcc acc;
                CM_FILL(acc, 0.0);
                CM_LOOP for (uint vt = 0u; vt < DVT; ++vt) {
                    CmB g_op;
                    CM_LOAD_BT(g_op, t_tile, 16u * qt * PITCH_T + 16u * vt, PITCH_T);
                    CM_MUL_ADD(acc, v_ops[vt], g_op, t_tile);
                }
                CM_STORE(acc, dp_tile, s_base + 16u * qt, PITCH_S);
            }
            CM_SUBGROUP_SYNC();

            // Wᵀ and dSᵀ per element (flash_bwd_kv.comp's rules), per query's row mask (a loop: the
            // mask model unrolled BR times would swell every pipeline). Per-lane choices are selects
            // (mix with a bool): the units' operations below follow no per-lane branch.
            for (uint c = 0u; c < SQ; ++c) {
                const uint q_local = c * SLANES + part, i = qb + q_local;
                const uint ic = min(i, queries.y - 1u);
                RowMask mask;
                if (elementwise) mask = row_mask(b, h, ic);  // key_terms reads its masks and ALiBi
                const float lse_i = tile_lse[q_local], delta_i = tile_delta[q_local];
                const uint first_i = tile_first[q_local], limit_i = tile_limit[q_local];
                [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
                    const uint key_local = lane / SLANES + t * (SG / SLANES), key = key0 + key_local;
                    const uint at = key_local * PITCH_S + q_local;
                    const float scaled = s_tile[s_base + at] * P.scale;
                    const float x = capped ? softcap(scaled) : scaled;
                    float terms = 0.0;
                    const bool inside = all(bvec2(i < queries.y, key < wg_key_end));
                    bool visible;
                    if (elementwise) {
                        const bool kept = key_terms(mask, key, terms);  // false past the row's keys
                        visible = all(bvec2(inside, kept));
                    } else {
                        visible = all(bvec3(inside, key >= first_i, key < limit_i));
                    }
                    const float p = mix(0.0, exp2((x + terms - lse_i) * LOG2E), visible);
                    float kappa = 1.0;
                    if (dropout) kappa = mix(0.0, keep_scale, dropout_keeps(b, h, ic, key));
                    float d = p * (kappa * dp_tile[s_base + at] - delta_i);
                    if (capped) {
                        const float th = x * P.mask.inv_softcap;  // tanh(scaled / c)
                        d *= 1.0 - th * th;
                    }
                    w_tile[p_base + key_local * PITCH_P + q_local] = CM_TO_ELEM(p * kappa);
                    ds_tile[p_base + key_local * PITCH_P + q_local] = CM_TO_ELEM(d);
                }
            }
            CM_SUBGROUP_SYNC();

            // dV += Wᵀ·dO with dO staged, then dK += dSᵀ·Q with Q staged again.
            CM_LOOP for (uint qt = 0u; qt < QT; ++qt) {
                CmA w_op;
                CM_LOAD_A(w_op, w_tile, p_base + 16u * qt, PITCH_P);
                CM_LOOP for (uint ot = 0u; ot < OT; ++ot) {
                    if (col_base + 16u * ot >= Dv) continue;  // uniform
                    CmB g_op;
                    CM_LOAD_B(g_op, t_tile, 16u * qt * PITCH_T + col_base + 16u * ot, PITCH_T);
                    CM_MUL_ADD(dv[ot], w_op, g_op, t_tile);
                }
            }
            barrier();
            stage_rows(b, h, qb, queries.y, false);
            barrier();
            CM_LOOP for (uint qt = 0u; qt < QT; ++qt) {
                CmA ds_op;
                CM_LOAD_A(ds_op, ds_tile, p_base + 16u * qt, PITCH_P);
                CM_LOOP for (uint ot = 0u; ot < OT; ++ot) {
                    if (col_base + 16u * ot >= Dk) continue;  // uniform
                    CmB q_op;
                    CM_LOAD_B(q_op, t_tile, 16u * qt * PITCH_T + col_base + 16u * ot, PITCH_T);
                    CM_MUL_ADD(dk[ot], ds_op, q_op, t_tile);
                }
            }
        }
    }

    // scale·dK and dV through the subgroup's Sᵀ tile, 16 columns at a time.
    const bool loud = gl_SubgroupSize != SG || gl_NumSubgroups != NSG;
    CM_LOOP for (uint ot = 0u; ot < OT; ++ot) {
        [[unroll]] for (uint which = 0u; which < 2u; ++which) {
            const uint D = which == 0u ? Dk : Dv;
            if (col_base + 16u * ot >= D) continue;  // uniform
            CM_SUBGROUP_SYNC();  // every lane has read the previous tile (and its last scores)
            if (which == 0u) CM_STORE(dk[ot], s_tile, s_base, PITCH_S);
            else CM_STORE(dv[ot], s_tile, s_base, PITCH_S);
            CM_SUBGROUP_SYNC();
            [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
                const uint key_local = lane / SLANES + t * (SG / SLANES), key = key0 + key_local;
                if (key >= wg_key_end) continue;
                const uint out_row = which == 0u ? tensor_index(P.dk, b, hk, key) : tensor_index(P.dv, b, hk, key);
                [[unroll]] for (uint c = 0u; c < SCOLS; ++c) {
                    const uint col = col_base + 16u * ot + part * SCOLS + c;
                    if (col >= D) continue;
                    const float value = s_tile[s_base + key_local * PITCH_S + part * SCOLS + c];
                    if (which == 0u) store_dk(out_row + col, loud ? quiet_nan() : value * P.scale);
                    else store_dv(out_row + col, loud ? quiet_nan() : value);
                }
            }
        }
    }
}

#version 450
// The backward pass's dQ on cooperative 16 × 16 × 16 matrices (issue #33): flash_bwd_q.comp's
// contract (its bindings, parameters, mask and feature rules; dQ stored once, no atomics: the same
// bits on every run) in flash_coopmat.comp's layout. Per key tile of BC keys:
//   dP = dO·Vᵀ and S = Q·Kᵀ as products (V, then K, staged as f16 where the other was),
//   P = exp(logit(S) − lse), dS = P ∘ (κ·dP − Δ) ∘ softcap'   (the subgroup's lanes, per element),
//   dQ += dS·K as products (dS rounded to f16).
// Work layout: workgroup = NSG subgroups of SG lanes, each owning 16 rows ρ = g·Nq + i over the K/V
// head's query heads, with their Q (DKT) and dO (DVT) as operands in registers and their dQ columns
// first_column + 16·t (t < OT) as accumulators. Key tiles outside every row's range are skipped.
// Reads words through common/operand_loader.glsl (f32, f16, bf16); dQ stored as q's type, times the
// scale. Operands f16, or bf16 where CM_BF16 is defined (what this file says of f16 holds for them).
// A subgroup layout other than the pipeline's writes NaN.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/backward_params.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint CM_SG = 32;  // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint BC = 64;     // keys per tile, a multiple of 16
layout(constant_id = 3) const uint DKT = 8;     // Q's and K's 16-dimension tiles: ceil(Dk / 16)
layout(constant_id = 4) const uint OT = 8;      // dQ's 16-column tiles per pass
layout(constant_id = 5) const uint DVT = 8;     // dO's and V's 16-dimension tiles: ceil(Dv / 16)
layout(constant_id = 6) const uint NSG = 4;     // subgroups per workgroup
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;

#include "common/coopmat.glsl"
#include "common/shared_atomics.glsl"

const uint SG = CM_SG;
const uint BR = 16u * NSG;
const uint KT = BC / 16u;
const uint DKP = 16u * DKT, DVP = 16u * DVT;
const uint WG = NSG * SG;
const uint SLANES = SG >= 16u ? SG / 16u : 1u;  // lanes per row for the elementwise step
const uint SROWS = SG >= 16u ? 1u : 16u / SG;   // rows per lane
const uint SKEYS = BC / SLANES;
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

// One K or V tile (and Q's, then dO's rows at the start), rows of max(DKP, DVP) + 8 elements; per
// subgroup fp32 S and dP tiles and the f16 dS tile.
const uint KV_ROWS = BC > BR ? BC : BR;
const uint PITCH_KV = (DKP > DVP ? DKP : DVP) + 8u;
const uint PITCH_S = BC + 4u, PITCH_P = BC + 8u;
CM_OPERAND_TILE(kv_tile, KV_ROWS * PITCH_KV);
CM_ACC_TILE_SCALAR(s_tile, NSG * 16u * PITCH_S);   // S, then dQ's tiles at the end
CM_ACC_TILE_SCALAR(dp_tile, NSG * 16u * PITCH_S);
CM_OPERAND_TILE_SCALAR(ds_tile, NSG * 16u * PITCH_P);
shared uint wg_first, wg_end;

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, inv = gl_LocalInvocationIndex;
    const uint part = lane % SLANES;
    const uint Hkv = P.shape.Hkv, group = P.shape.group, Nq = P.shape.Nq, Nkv = P.shape.Nkv;
    const uint Dk = P.shape.Dk, Dv = P.shape.Dv;
    const uint unit = P.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    const uint rows_end = group * Nq;
    const uint block_rho = gl_WorkGroupID.x * BR;
    const uint s_base = sg * 16u * PITCH_S, p_base = sg * 16u * PITCH_P;

    // The lane's rows for the elementwise step: key ranges, lse and Δ.
    uint local_row[SROWS], first[SROWS], limit[SROWS];
    float lse_row[SROWS], delta_row[SROWS];
    uint lo_first = 0xffffffffu, hi_limit = 0u;
    bool has_rows = false;
    [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
        local_row[t] = lane / SLANES + t * (SG / SLANES);
        const uint at = block_rho + sg * 16u + local_row[t];
        const uint rho = min(at, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        lse_row[t] = lse[tensor_index(P.lse, b, h, i)];
        delta_row[t] = delta[tensor_index(P.delta, b, h, i)];
        const RowMask mask = row_mask(b, h, i);
        first[t] = mask.first;
        limit[t] = min(mask.limit, Nkv);
        lo_first = min(lo_first, first[t]);
        hi_limit = max(hi_limit, limit[t]);
        has_rows = has_rows || at < rows_end;
    }
    if (inv == 0u) {
        wg_first = 0xffffffffu;
        wg_end = 0u;
    }
    barrier();
    if (has_rows && lo_first < hi_limit) {
        SHARED_ATOMIC_MIN(wg_first, lo_first);
        SHARED_ATOMIC_MAX(wg_end, hi_limit);
    }
    // Q's rows, then dO's, through the K/V tile into registers.
    for (uint e = inv; e < BR * DKP / 8u; e += WG) {
        const uint row = e / (DKP / 8u), d = 8u * (e % (DKP / 8u));
        const uint rho = min(block_rho + row, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        const uint at = tensor_index(P.q, b, h, i) + d;
        CM_ELEM4 lo, hi;
        CM_FETCH8(load_q4, at, d, Dk, lo, hi);
        CM_PUT8(kv_tile, row * PITCH_KV + d, lo, hi);
    }
    barrier();
    CmA q_ops[DKT];
    CM_LOOP for (uint dt = 0u; dt < DKT; ++dt) CM_LOAD_A(q_ops[dt], kv_tile, sg * 16u * PITCH_KV + 16u * dt, PITCH_KV);
    barrier();
    for (uint e = inv; e < BR * DVP / 8u; e += WG) {
        const uint row = e / (DVP / 8u), d = 8u * (e % (DVP / 8u));
        const uint rho = min(block_rho + row, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        const uint at = tensor_index(P.grad_out, b, h, i) + d;
        CM_ELEM4 lo, hi;
        CM_FETCH8(load_g4, at, d, Dv, lo, hi);
        CM_PUT8(kv_tile, row * PITCH_KV + d, lo, hi);
    }
    barrier();
    CmA g_ops[DVT];
    CM_LOOP for (uint vt = 0u; vt < DVT; ++vt) CM_LOAD_A(g_ops[vt], kv_tile, sg * 16u * PITCH_KV + 16u * vt, PITCH_KV);

    const uint k_begin = wg_first, k_end = wg_end;
    // The keys every row of the subgroup sees, subgroup-wide: the test-free tiles are then uniform
    // (docs/design/GPU_KERNELS.md, "Reconvergence").
    uint lo_all = k_end, hi_all = k_begin;
    [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
        hi_all = max(hi_all, first[t]);
        lo_all = min(lo_all, limit[t]);
    }
    hi_all = subgroupMax(hi_all);
    lo_all = subgroupMin(lo_all);
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float scale = P.scale, keep_scale = P.mask.keep_scale;
    const uint key_last = max(k_end, 1u) - 1u;
    const uint col_base = P.first_column;

    CmAcc dq[OT];
    CM_LOOP for (uint ot = 0u; ot < OT; ++ot) CM_FILL(dq[ot], 0.0);

    for (uint kb0 = k_begin; kb0 < k_end; kb0 += 4096u * BC)
    for (uint kb = kb0; kb < min(k_end, kb0 + 4096u * BC); kb += BC) {
        // dP = dO·Vᵀ.
        barrier();  // every subgroup is done with the previous tile's K (and the start's staging)
        for (uint e = inv; e < BC * DVP / 8u; e += WG) {
            const uint key = e / (DVP / 8u), d = 8u * (e % (DVP / 8u));
            const uint at = tensor_index(P.v, b, hk, min(kb + key, key_last)) + d;
            CM_ELEM4 lo, hi;
            CM_FETCH8(load_v4, at, d, Dv, lo, hi);
            CM_PUT8(kv_tile, key * PITCH_KV + d, lo, hi);
        }
        barrier();
        CM_LOOP for (uint kt = 0u; kt < KT; ++kt) {
            CmAcc acc;
            CM_FILL(acc, 0.0);
            CM_LOOP for (uint vt = 0u; vt < DVT; ++vt) {
                CmB v_op;
                CM_LOAD_BT(v_op, kv_tile, 16u * kt * PITCH_KV + 16u * vt, PITCH_KV);
                CM_MUL_ADD(acc, g_ops[vt], v_op, kv_tile);
            }
            CM_STORE(acc, dp_tile, s_base + 16u * kt, PITCH_S);
        }
        // S = Q·Kᵀ, K staged where V was.
        barrier();
        for (uint e = inv; e < BC * DKP / 8u; e += WG) {
            const uint key = e / (DKP / 8u), d = 8u * (e % (DKP / 8u));
            const uint at = tensor_index(P.k, b, hk, min(kb + key, key_last)) + d;
            CM_ELEM4 lo, hi;
            CM_FETCH8(load_k4, at, d, Dk, lo, hi);
            CM_PUT8(kv_tile, key * PITCH_KV + d, lo, hi);
        }
        barrier();
        CM_LOOP for (uint kt = 0u; kt < KT; ++kt) {
            CmAcc acc;
            CM_FILL(acc, 0.0);
            CM_LOOP for (uint dt = 0u; dt < DKT; ++dt) {
                CmB k_op;
                CM_LOAD_BT(k_op, kv_tile, 16u * kt * PITCH_KV + 16u * dt, PITCH_KV);
                CM_MUL_ADD(acc, q_ops[dt], k_op, kv_tile);
            }
            CM_STORE(acc, s_tile, s_base + 16u * kt, PITCH_S);
        }
        CM_SUBGROUP_SYNC();

        // dS per element (flash_bwd_q.comp's rules), into the subgroup's f16 tile. Per-lane choices
        // are selects (mix with a bool): the units' operations below follow no per-lane branch.
        const bool whole = !elementwise && kb >= hi_all && kb + BC <= lo_all;
        [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
            const uint rho = min(block_rho + sg * 16u + local_row[t], rows_end - 1u);
            const uint h = hk * group + rho / Nq, i = rho % Nq;
            RowMask mask;
            if (elementwise) mask = row_mask(b, h, i);
            for (uint c = 0u; c < SKEYS; ++c) {  // a loop: the mask model unrolled BC times would swell the pipeline
                const uint key_local = c * SLANES + part, key = kb + key_local;
                const uint at = local_row[t] * PITCH_S + key_local;
                const float scaled = s_tile[s_base + at] * scale;
                const float x = capped ? softcap(scaled) : scaled;
                float terms = 0.0;
                bool visible;
                if (elementwise) {
                    const bool kept = key_terms(mask, key, terms);  // false past the row's keys
                    visible = all(bvec2(key < Nkv, kept));
                } else {
                    visible = any(bvec2(whole, all(bvec2(key >= first[t], key < limit[t]))));
                }
                const float p = mix(0.0, exp2((x + terms - lse_row[t]) * LOG2E), visible);
                float dpk = dp_tile[s_base + at];
                if (dropout) dpk = mix(0.0, dpk * keep_scale, dropout_keeps(b, h, i, key));
                float ds = p * (dpk - delta_row[t]);
                if (capped) {
                    const float th = x * P.mask.inv_softcap;  // tanh(scaled / c)
                    ds *= 1.0 - th * th;
                }
                ds_tile[p_base + local_row[t] * PITCH_P + key_local] = CM_TO_ELEM(ds);
            }
        }
        CM_SUBGROUP_SYNC();

        // dQ += dS·K for this pass's columns.
        CM_LOOP for (uint kt = 0u; kt < KT; ++kt) {
            CmA ds_op;
            CM_LOAD_A(ds_op, ds_tile, p_base + 16u * kt, PITCH_P);
            CM_LOOP for (uint ot = 0u; ot < OT; ++ot) {
                if (col_base + 16u * ot >= Dk) continue;  // uniform
                CmB k_op;
                CM_LOAD_B(k_op, kv_tile, 16u * kt * PITCH_KV + col_base + 16u * ot, PITCH_KV);
                CM_MUL_ADD(dq[ot], ds_op, k_op, kv_tile);
            }
        }
    }

    // scale·dQ through the subgroup's S tile, 16 columns at a time.
    const bool loud = gl_SubgroupSize != SG || gl_NumSubgroups != NSG;
    CM_LOOP for (uint ot = 0u; ot < OT; ++ot) {
        if (col_base + 16u * ot >= Dk) continue;  // uniform
        CM_SUBGROUP_SYNC();  // every lane has read the previous tile (and its last scores)
        CM_STORE(dq[ot], s_tile, s_base, PITCH_S);
        CM_SUBGROUP_SYNC();
        [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
            const uint rho = block_rho + sg * 16u + local_row[t];
            if (rho >= rows_end) continue;
            const uint h = hk * group + rho / Nq, i = rho % Nq;
            const uint dq_row = tensor_index(P.dq, b, h, i);
            [[unroll]] for (uint c = 0u; c < SCOLS; ++c) {
                const uint col = col_base + 16u * ot + part * SCOLS + c;
                if (col < Dk)
                    store_dq(dq_row + col, loud ? quiet_nan() : s_tile[s_base + local_row[t] * PITCH_S + part * SCOLS + c] * scale);
            }
        }
    }
}

#version 450
// The backward pass's dK and dV on workgroup-scope matrices (VK_NV_cooperative_matrix2; issue #33,
// docs/design/GPU_KERNELS.md "Workgroup matrices"): flash_bwd_kv_coopmat.comp's contract (its
// bindings, parameters, mask and feature rules; the group's query heads summed in a fixed order, no
// atomics: the same bits on every run) for q, k, v and dO stored as f16 (bf16 with CM_BF16). The workgroup owns BK =
// 16·NSG keys, their K and V as A operands (tensor loads, once) and dK's and dV's columns
// first_column + [0, OC) as accumulators. Per query head of the group and query tile of BR queries:
//   Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (Qᵀ and dOᵀ tensor loads through a transposed view),
//   Pᵀ = exp(logit(Sᵀ) − lse), Wᵀ = κ·Pᵀ, dSᵀ = Pᵀ ∘ (κ·dPᵀ − Δ) ∘ softcap'   (element operations,
//   by key and query, the tile's per-query terms staged in shared memory),
//   dV += Wᵀ·dO and dK += dSᵀ·Q (W and dS converted to the operands' type in registers; dO and Q tensor loads).
// On the units (CM_KHR) the driver lays out and stages the matrices; elsewhere common/wg_matrix.glsl's
// portable twin runs the same code, its operands in shared memory.
// Queries outside query_range() of the workgroup's keys are never visited. dK (times the scale) and
// dV are stored as k's and v's types.
#ifdef CM_KHR
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#ifdef CM_BF16
#extension GL_EXT_bfloat16 : require
#endif
#endif
#extension GL_EXT_control_flow_attributes : enable

#include "common/backward_params.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 2) const uint BR = 64;     // queries per tile, a multiple of 16
layout(constant_id = 3) const uint DKT = 8;     // Q's and K's 16-dimension tiles: ceil(Dk / 16)
layout(constant_id = 4) const uint OT = 8;      // dK's and dV's 16-column tiles per pass
layout(constant_id = 5) const uint DVT = 8;     // dO's and V's 16-dimension tiles: ceil(Dv / 16)
layout(constant_id = 6) const uint NSG = 4;     // subgroups: 16 keys each
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;

const uint BK = 16u * NSG, DKP = 16u * DKT, DVP = 16u * DVT, OC = 16u * OT, WG = gl_WorkGroupSize.x;
const float LOG2E = 1.4426950408889634;

#include "common/wg_matrix.glsl"
WG_HALVES(QHalves, q_halves, 1);
WG_HALVES(KHalves, k_halves, 2);
WG_HALVES(VHalves, v_halves, 3);
WG_HALVES(GHalves, g_halves, 10);
// The portable implementation's operands (none on the units: the driver stages).
WG_OPERAND_STORAGE(k_op, BK, DKP)
WG_OPERAND_STORAGE(v_op, BK, DVP)
WG_OPERAND_STORAGE(qt_op, DKP, BR)
WG_OPERAND_STORAGE(gt_op, DVP, BR)
WG_OPERAND_STORAGE(w_op, BK, BR)
WG_OPERAND_STORAGE(ds_op, BK, BR)
WG_OPERAND_STORAGE(g_cols, BR, OC)
WG_OPERAND_STORAGE(q_cols, BR, OC)
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

// The query tile's per-query terms (lse, Δ, the row mask's key range; its RowMask where masks are
// elementwise), staged once per tile: what the element operations look up by column.
shared float tile_lse[BR], tile_delta[BR];
shared uint tile_first[BR], tile_limit[BR];
shared RowMask tile_masks[BR];
uint batch = 0u, head = 0u, query0 = 0u, queries_end = 0u, key0 = 0u, keys_end = 0u;

float bkv_logit(const in float s) { return P.mask.softcap > 0.0 ? softcap(s * P.scale) : s * P.scale; }
// Pᵀ's element (key r, query c): exp(logit + terms − lse) where visible, else 0.
float bkv_prob(const in uint r, const in uint c, const in float s) {
    const uint key = key0 + r, i = query0 + c;
    float terms = 0.0;
    bool visible = i < queries_end && key < keys_end;
    if (has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI)) {
        visible = visible && key_terms(tile_masks[c], key, terms);  // false past the row's keys
    } else {
        visible = visible && key >= tile_first[c] && key < tile_limit[c];
    }
    return visible ? exp2((bkv_logit(s) + terms - tile_lse[c]) * LOG2E) : 0.0;
}
// Wᵀ's element: p times dropout's factor κ of (key r, query c), keep_scale where kept, 0 where dropped.
float bkv_weight(const in uint r, const in uint c, const in float p) {
    return dropout_keeps(batch, head, min(query0 + c, queries_end - 1u), key0 + r) ? p * P.mask.keep_scale : 0.0;
}
// softcap's slope at the logit of s: 1 − tanh²(scaled / c), 1 without a softcap.
float bkv_softcap_slope(const in float s) {
    if (!(P.mask.softcap > 0.0)) return 1.0;
    const float th = bkv_logit(s) * P.mask.inv_softcap;  // tanh(scaled / c)
    return 1.0 - th * th;
}
// Without dropout: dSᵀ = Pᵀ ∘ (dPᵀ − Δ) ∘ softcap'.
float bkv_grad(const in uint r, const in uint c, const in float p, const in float dp, const in float s) {
    return p * (dp - tile_delta[c]) * bkv_softcap_slope(s);
}
// With dropout, from Wᵀ ∘ dPᵀ (W = κ·P, so κ is drawn once per weight, not once for W and again
// for dS): dSᵀ = (Wᵀ ∘ dPᵀ − Pᵀ·Δ) ∘ softcap'.
float bkv_kept_product(const in uint r, const in uint c, const in float w, const in float dp) { return w * dp; }
float bkv_grad_kept(const in uint r, const in uint c, const in float wdp, const in float p, const in float s) {
    return (wdp - p * tile_delta[c]) * bkv_softcap_slope(s);
}
float bkv_store_dk(const in uint r, const in uint c, const in float value) {
    const uint key = key0 + r, col = P.first_column + c;
    if (key < keys_end && col < P.shape.Dk) store_dk(tensor_index(P.dk, batch, head, key) + col, value * P.scale);
    return value;
}
float bkv_store_dv(const in uint r, const in uint c, const in float value) {
    const uint key = key0 + r, col = P.first_column + c;
    if (key < keys_end && col < P.shape.Dv) store_dv(tensor_index(P.dv, batch, head, key) + col, value);
    return value;
}

void main() {
    const uint inv = gl_LocalInvocationIndex;
    const uint Hkv = P.shape.Hkv, group = P.shape.group, Nq = P.shape.Nq, Nkv = P.shape.Nkv;
    const uint unit = P.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    batch = b;
    key0 = gl_WorkGroupID.x * BK;
    keys_end = min(key0 + BK, Nkv);
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool dropout = P.mask.drop_threshold != 0u;
    // The queries that may see the workgroup's keys (the same for every head of the batch).
    const uvec2 queries = query_range(b, key0, max(keys_end, key0 + 1u));
    queries_end = queries.y;

    // K's and V's rows as A operands: keys past Nkv read as 0, columns past Dk (Dv) too.
    WG_LAYOUT(k_layout, Nkv, P.shape.Dk, P.k.stride.z);
    WG_LAYOUT(v_layout, Nkv, P.shape.Dv, P.v.stride.z);
    WG_LOAD(k_op, BK, DKP, gl_MatrixUseA, k_halves, tensor_index(P.k, b, hk, 0u), k_layout, key0, BK, 0, DKP);
    WG_LOAD(v_op, BK, DVP, gl_MatrixUseA, v_halves, tensor_index(P.v, b, hk, 0u), v_layout, key0, BK, 0, DVP);
    // Q's and dO's rows of a head: queries past the range read as 0 (their P is 0 whatever they hold).
    WG_LAYOUT(q_layout, queries.y, P.shape.Dk, P.q.stride.z);
    WG_LAYOUT(g_layout, queries.y, P.shape.Dv, P.grad_out.stride.z);
    WG_TRANSPOSED(transposed);

    WG_FILLED(dk, BK, OC, 0.0);
    WG_FILLED(dv, BK, OC, 0.0);
    for (uint g = 0u; g < group; ++g) {
        const uint h = hk * group + g;
        const uint q_head = tensor_index(P.q, b, h, 0u), g_head = tensor_index(P.grad_out, b, h, 0u);
        for (uint qb = queries.x; qb < queries.y; qb += BR) {
            barrier();  // every invocation is done with the previous tile's terms
            for (uint e = inv; e < BR; e += WG) {
                const uint ic = min(qb + e, queries.y - 1u);
                const RowMask mask = row_mask(b, h, ic);
                tile_lse[e] = lse[tensor_index(P.lse, b, h, ic)];
                tile_delta[e] = delta[tensor_index(P.delta, b, h, ic)];
                tile_first[e] = mask.first;
                tile_limit[e] = mask.limit;
                if (elementwise) tile_masks[e] = mask;
            }
            barrier();
            head = h;  // the element operations' (b, h) for dropout
            query0 = qb;

            WG_LOAD_VIEW(qt_op, DKP, BR, gl_MatrixUseB, q_halves, q_head, q_layout, qb, BR, 0, DKP, transposed);
            WG_FILLED(s, BK, BR, 0.0);
            WG_PRODUCT(s, k_op, qt_op, BK, DKP, BR);
            WG_LOAD_VIEW(gt_op, DVP, BR, gl_MatrixUseB, g_halves, g_head, g_layout, qb, BR, 0, DVP, transposed);
            WG_FILLED(dp, BK, BR, 0.0);
            WG_PRODUCT(dp, v_op, gt_op, BK, DVP, BR);

            WG_ACC(p, BK, BR);
            WG_MAP0(p, s, BK, BR, bkv_prob);
            WG_ACC(ds, BK, BR);
            WG_ACC(w, BK, BR);
            if (dropout) {
                WG_MAP0(w, p, BK, BR, bkv_weight);
                WG_MAP_M(ds, w, BK, BR, bkv_kept_product, dp);
                WG_MAP_MM(ds, ds, BK, BR, bkv_grad_kept, p, s);
            } else {
                WG_COPY(w, p, BK, BR);
                WG_MAP_MM(ds, p, BK, BR, bkv_grad, dp, s);
            }

            WG_TO_OPERAND(w_op, BK, BR, gl_MatrixUseA, w);
            WG_LOAD(g_cols, BR, OC, gl_MatrixUseB, g_halves, g_head, g_layout, qb, BR, P.first_column, OC);
            WG_PRODUCT(dv, w_op, g_cols, BK, BR, OC);
            WG_TO_OPERAND(ds_op, BK, BR, gl_MatrixUseA, ds);
            WG_LOAD(q_cols, BR, OC, gl_MatrixUseB, q_halves, q_head, q_layout, qb, BR, P.first_column, OC);
            WG_PRODUCT(dk, ds_op, q_cols, BK, BR, OC);
        }
    }
    head = hk;  // dK's and dV's (b, hk) rows
    WG_MAP0(dk, dk, BK, OC, bkv_store_dk);
    WG_MAP0(dv, dv, BK, OC, bkv_store_dv);
}

#version 450
// The backward pass's dQ on workgroup-scope matrices (VK_NV_cooperative_matrix2; issue #33,
// docs/design/GPU_KERNELS.md "Workgroup matrices"): flash_bwd_q_coopmat.comp's contract (its
// bindings, parameters, mask and feature rules; dQ stored once, no atomics: the same bits on every
// run) for q, k, v and dO stored as f16 (bf16 with CM_BF16: bf16 operands). The workgroup owns BR rows ρ = g·Nq + i over the K/V head's
// query heads, their Q and dO as A operands (loaded once, element by element) and dQ's columns
// first_column + [0, OC) as one accumulator. Per key tile of BC keys:
//   S = Q·Kᵀ and dP = dO·Vᵀ (Kᵀ and Vᵀ tensor loads through a transposed view),
//   P = exp(logit(S) − lse), dS = P ∘ (κ·dP − Δ) ∘ softcap'   (element operations, by row and key),
//   dQ += dS·K (dS converted to the operands' type in registers; K's tile a tensor load).
// On the units (CM_KHR) the driver lays out and stages the matrices; elsewhere common/wg_matrix.glsl's
// portable twin runs the same code, its operands in shared memory.
// Key tiles outside every row's range are skipped. dQ is stored as q's type, times the scale.
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
layout(constant_id = 2) const uint BC = 64;     // keys per tile, a multiple of 16
layout(constant_id = 3) const uint DKT = 8;     // Q's and K's 16-dimension tiles: ceil(Dk / 16)
layout(constant_id = 4) const uint OT = 8;      // dQ's 16-column tiles per pass
layout(constant_id = 5) const uint DVT = 8;     // dO's and V's 16-dimension tiles: ceil(Dv / 16)
layout(constant_id = 6) const uint NSG = 4;     // subgroups: 16 rows each
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;

const uint BR = 16u * NSG, DKP = 16u * DKT, DVP = 16u * DVT, OC = 16u * OT, WG = gl_WorkGroupSize.x;
const float LOG2E = 1.4426950408889634;

#define OL_NAME load_q4
#define OL_SLOT 1
#define OL_TYPE Q_TYPE
#include "common/operand_loader.glsl"
#define OL_NAME load_g4
#define OL_SLOT 10
#define OL_TYPE Q_TYPE
#include "common/operand_loader.glsl"
#include "common/wg_matrix.glsl"
WG_HALVES(KHalves, k_halves, 2);
WG_HALVES(VHalves, v_halves, 3);
// The portable implementation's operands (none on the units: the driver stages).
WG_OPERAND_STORAGE(q_op, BR, DKP)
WG_OPERAND_STORAGE(g_op, BR, DVP)
WG_OPERAND_STORAGE(kt_op, DKP, BC)
WG_OPERAND_STORAGE(vt_op, DVP, BC)
WG_OPERAND_STORAGE(ds_op, BR, BC)
WG_OPERAND_STORAGE(k_op, BC, OC)
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
#include "common/shared_atomics.glsl"

// The rows' facts, written once: what the element operations look up by row.
shared float row_lse[BR], row_delta[BR];
shared uint row_first[BR], row_limit[BR], row_head[BR], row_query[BR];
shared uint row_q_at[BR], row_g_at[BR], row_dq_at[BR];  // Q's, dO's and dQ's (b, h, i, 0); ~0u: not stored
shared RowMask row_masks[BR];                           // where masks are elementwise
shared uint wg_first, wg_end, wg_hi_first, wg_lo_limit;
uint batch = 0u;

float bq_q_element(const in uint r, const in uint d, const in float unused) {
    return d < P.shape.Dk ? load_q4(row_q_at[r] + d, 1u).x : 0.0;
}
float bq_g_element(const in uint r, const in uint d, const in float unused) {
    return d < P.shape.Dv ? load_g4(row_g_at[r] + d, 1u).x : 0.0;
}
// The score's logit (scale, softcap) as flash_bwd_q_coopmat.comp has it.
float bq_logit(const in float s) { return P.mask.softcap > 0.0 ? softcap(s * P.scale) : s * P.scale; }
// P: exp(logit + terms − lse) where the key is visible to the row, else 0.
float bq_prob(const in uint r, const in uint c, const in float s, const in uint kb, const in uint whole) {
    const uint key = kb + c;
    float terms = 0.0;
    bool visible;
    if (has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI)) {
        visible = key < P.shape.Nkv && key_terms(row_masks[r], key, terms);
    } else {
        visible = whole != 0u || (key >= row_first[r] && key < row_limit[r]);
    }
    return visible ? exp2((bq_logit(s) + terms - row_lse[r]) * LOG2E) : 0.0;
}
// dS = P ∘ (κ·dP − Δ) ∘ softcap'.
float bq_grad(const in uint r, const in uint c, const in float p, const in float dp, const in float s, const in uint kb) {
    float dpk = dp;
    if (P.mask.drop_threshold != 0u) dpk = dropout_keeps(batch, row_head[r], row_query[r], kb + c) ? dp * P.mask.keep_scale : 0.0;
    float ds = p * (dpk - row_delta[r]);
    if (P.mask.softcap > 0.0) {
        const float th = bq_logit(s) * P.mask.inv_softcap;  // tanh(scaled / c)
        ds *= 1.0 - th * th;
    }
    return ds;
}
float bq_store(const in uint r, const in uint c, const in float value) {
    const uint col = P.first_column + c;
    if (row_dq_at[r] != 0xffffffffu && col < P.shape.Dk) store_dq(row_dq_at[r] + col, value * P.scale);
    return value;
}

void main() {
    const uint inv = gl_LocalInvocationIndex;
    const uint Hkv = P.shape.Hkv, group = P.shape.group, Nq = P.shape.Nq, Nkv = P.shape.Nkv;
    const uint unit = P.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    batch = b;
    const uint rows_end = group * Nq, block_rho = gl_WorkGroupID.x * BR;
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);

    if (inv == 0u) {
        wg_first = 0xffffffffu;
        wg_end = 0u;
        wg_hi_first = 0u;
        wg_lo_limit = 0xffffffffu;
    }
    barrier();
    for (uint r = inv; r < BR; r += WG) {
        const uint at = block_rho + r, rho = min(at, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        RowMask mask = row_mask(b, h, i);
        mask.limit = min(mask.limit, Nkv);
        row_lse[r] = lse[tensor_index(P.lse, b, h, i)];
        row_delta[r] = delta[tensor_index(P.delta, b, h, i)];
        row_first[r] = mask.first;
        row_limit[r] = mask.limit;
        if (elementwise) row_masks[r] = mask;
        row_head[r] = h;
        row_query[r] = i;
        row_q_at[r] = tensor_index(P.q, b, h, i);
        row_g_at[r] = tensor_index(P.grad_out, b, h, i);
        row_dq_at[r] = at < rows_end ? tensor_index(P.dq, b, h, i) : 0xffffffffu;
        if (at < rows_end && mask.first < mask.limit) {
            SHARED_ATOMIC_MIN(wg_first, mask.first);
            SHARED_ATOMIC_MAX(wg_end, mask.limit);
        }
        SHARED_ATOMIC_MAX(wg_hi_first, mask.first);
        SHARED_ATOMIC_MIN(wg_lo_limit, mask.limit);
    }
    barrier();
    const uint k_begin = wg_first, k_end = wg_end, hi_all = wg_hi_first, lo_all = wg_lo_limit;

    // Q and dO as A operands, through fp32 accumulators, rounded to the operands' type as they convert.
    WG_FILLED(q_acc, BR, DKP, 0.0);
    WG_MAP0(q_acc, q_acc, BR, DKP, bq_q_element);
    WG_TO_OPERAND(q_op, BR, DKP, gl_MatrixUseA, q_acc);
    WG_FILLED(g_acc, BR, DVP, 0.0);
    WG_MAP0(g_acc, g_acc, BR, DVP, bq_g_element);
    WG_TO_OPERAND(g_op, BR, DVP, gl_MatrixUseA, g_acc);

    // K's and V's rows of the head: keys past the workgroup's last read as 0, columns past Dk (Dv) too.
    WG_LAYOUT(k_layout, k_end, P.shape.Dk, P.k.stride.z);
    WG_LAYOUT(v_layout, k_end, P.shape.Dv, P.v.stride.z);
    WG_TRANSPOSED(transposed);
    const uint k_head = tensor_index(P.k, b, hk, 0u), v_head = tensor_index(P.v, b, hk, 0u);

    WG_FILLED(dq, BR, OC, 0.0);
    for (uint kb = k_begin; kb < k_end; kb += BC) {
        WG_LOAD_VIEW(kt_op, DKP, BC, gl_MatrixUseB, k_halves, k_head, k_layout, kb, BC, 0, DKP, transposed);
        WG_FILLED(s, BR, BC, 0.0);
        WG_PRODUCT(s, q_op, kt_op, BR, DKP, BC);
        WG_LOAD_VIEW(vt_op, DVP, BC, gl_MatrixUseB, v_halves, v_head, v_layout, kb, BC, 0, DVP, transposed);
        WG_FILLED(dp, BR, BC, 0.0);
        WG_PRODUCT(dp, g_op, vt_op, BR, DVP, BC);

        const bool whole = !elementwise && kb >= hi_all && kb + BC <= lo_all;
        WG_ACC(p, BR, BC);
        WG_MAP2(p, s, BR, BC, bq_prob, kb, whole ? 1u : 0u);
        WG_ACC(ds, BR, BC);
        WG_MAP_MM1(ds, p, BR, BC, bq_grad, dp, s, kb);
        WG_TO_OPERAND(ds_op, BR, BC, gl_MatrixUseA, ds);
        WG_LOAD(k_op, BC, OC, gl_MatrixUseB, k_halves, k_head, k_layout, kb, BC, P.first_column, OC);
        WG_PRODUCT(dq, ds_op, k_op, BR, BC, OC);
    }
    WG_MAP0(dq, dq, BR, OC, bq_store);
}

#version 450
// Fused attention on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2; issue #33,
// docs/design/GPU_KERNELS.md "Workgroup matrices"): flash_coopmat.comp's contract (flash.comp's
// bindings and parameters, SPLIT, column passes, every mask, softcap, ALiBi, sinks, dropout, varlen,
// every Q and O type, K/V of every storage type, paged K/V), where the driver offers what this needs:
// workgroup scope, tensor addressing, row reductions, element operations and conversions.
//
// Work layout: the workgroup owns BR query rows and their O (BR × OC, fp32) as one accumulator; its
// Q as one BR × DKP operand (f16, or bf16 where CM_BF16 is defined: where q, k or v is stored as
// bf16), loaded once, element by element, through the typed loader. Per key
// tile of BC keys: K's tile is a tensor load (transposed, zero past Dk and past the keys; with
// STAGED the workgroup stages it as operands in shared memory through the typed loaders, then loads it
// from there: K/V of any storage type or alignment, PAGED rows through the block table), S = Q·Kᵀ
// one product; the scale, softcap, masks and ALiBi are an element operation on S with each element's
// row and key; the row maxima and sums are row reductions into BR × RW matrices (each row's value
// smeared across its columns), widened again by a reduction where S or O needs them; P converts to the
// operand without leaving the registers, and O += P·V with V's tile loaded as K's was. On the units
// (CM_KHR) the driver lays the matrices over the workgroup and stages the tensor loads as it
// chooses: nothing of S or P passes through this kernel's shared memory, which holds the rows' facts
// and, STAGED, K's and V's tile. Elsewhere common/wg_matrix.glsl's portable twin runs the same
// code, its operands and reductions in shared memory.
// What the matrix units cannot take is refused on the host (CoopmatLayout::workgroup_matrices):
// heads past 128. K/V other than dense rows of the operands' type on 16 bytes take STAGED
// (CoopmatLayout::staged).
// A row with no visible key keeps m = MASKED: O = 0, lse = −∞ (or its sink); NaN scores poison the
// row (its O and lse NaN), as flash_coopmat.comp's.
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

#include "common/flash_params.glsl"

layout(local_size_x_id = 0) in;                 // the workgroup's invocations (NSG · SG)
layout(constant_id = 1) const uint SG = 32;     // lanes per subgroup: the layout's, not the kernel's concern
layout(constant_id = 2) const uint BC = 64;     // keys per tile, a multiple of 16
layout(constant_id = 3) const uint DKT = 8;     // Q's and K's 16-dimension tiles: ceil(Dk / 16)
layout(constant_id = 4) const uint OT = 8;      // O's 16-column tiles per pass
layout(constant_id = 5) const bool SPLIT = false;
layout(constant_id = 6) const uint NSG = 4;     // subgroups; BR = 16 · RT · NSG rows
layout(constant_id = 7) const uint RW = 16;     // the row values' columns: 16, or the device's coarser N granularity
#ifdef PAGED
#define STAGED                                   // a paged cache's rows are read by the typed loaders
layout(constant_id = 10) const uint POOLS = 1;
#endif
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;
layout(constant_id = 17) const uint RT = 1;     // 16-row tiles per subgroup

const uint BR = 16u * RT * NSG, DKP = 16u * DKT, OC = 16u * OT, WG = NSG * SG;
const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;

#include "common/tile_operands.glsl"
#include "common/shared_atomics.glsl"
#include "common/wg_matrix.glsl"
#ifdef STAGED
// K's tile, then V's where it was, as operands: [key][d], then [key][column], each row padded by 8 elements
// (16 bytes) so that consecutive rows start in other banks, as flash_coopmat.comp's tiles.
const uint K_PITCH = DKP + 8u, V_PITCH = OC + 8u;
WG_STAGE_STORAGE(kv_stage, BC * (K_PITCH > V_PITCH ? K_PITCH : V_PITCH))
#else
// K's and V's bindings again as the operands' elements, for the tensor loads (Vulkan lets variables alias a binding).
WG_HALVES(KHalves, k_halves, 2);
WG_HALVES(VHalves, v_halves, 3);
#endif
// The portable implementation's operands and reductions (none on the units: the driver stages).
WG_OPERAND_STORAGE(q_op, BR, DKP)
WG_OPERAND_STORAGE(k_op, DKP, BC)
WG_OPERAND_STORAGE(p_op, BR, BC)
WG_OPERAND_STORAGE(v_op, BC, OC)
WG_REDUCE_STORAGE(BR * (BC > RW ? BC : RW))  // the widest reduced: S's shape, or the row values'

// A row's value (its maximum, sum, factor) is smeared across RW columns (BR × RW): the narrowest
// matrix the flexible dimensions allow (16, or the device's N granularity where coarser: NVIDIA's is
// 32 at 256 invocations). Rows' values held so cost RW / BC of S's shape in registers and arithmetic
// (the factor's exp2 per row, not per score), and widen by a row reduction where an element
// operation pairs them with S (BR × BC) or O (BR × OC).

// The rows' facts, written once before the key loop: what the element operations look up by row.
shared uint row_first[BR], row_limit[BR];  // the row's keys [first, limit): length, causal, window, split
shared uint row_head[BR], row_query[BR];   // h, and i clamped to the batch's queries (masks, dropout)
shared uint row_q_at[BR];                  // Q's element index of (b, h, i, 0)
shared uint row_out[BR], row_lse_at[BR];   // O's index of (row, column 0) and lse's; ~0u: not stored
shared RowMask row_masks[BR];              // where masks are elementwise (bool, float, ALiBi)
shared uint wg_first, wg_end;              // the workgroup's key range: its stored rows' union
shared uint wg_hi_first, wg_lo_limit;      // keys every row sees: [wg_hi_first, wg_lo_limit)
uint batch = 0u;                           // b, for dropout

float cm2_q_element(const in uint r, const in uint d, const in float unused) {
    return d < P.shape.Dk ? load_q4(row_q_at[r] + d, 1u).x : 0.0;
}

// A score into the softmax's log2 units: scaled (softcapped), masked to MASKED, its terms added.
float cm2_logit(const in uint r, const in uint c, const in float s, const in uint kb, const in uint whole) {
    float v = P.mask.softcap > 0.0 ? softcap(s * P.scale) * LOG2E : s * (P.scale * LOG2E);
    if (whole != 0u) return v;
    const uint key = kb + c;
    if (has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI)) {
        float terms;
        const bool visible = key_terms(row_masks[r], key, terms);
        return visible ? v + terms * LOG2E : MASKED;
    }
    return key < row_first[r] || key >= row_limit[r] ? MASKED : v;
}

float cm2_max(const in float x, const in float y) { return max(x, y); }
float cm2_add(const in float x, const in float y) { return x + y; }
float cm2_first(const in float x, const in float y) { return x; }  // a row's value, smeared (all equal)
float cm2_max2(const in uint r, const in uint c, const in float x, const in float y) { return max(x, y); }
// The old maximum's factor: 0 where there was none (O and l are 0 then).
float cm2_alpha(const in uint r, const in uint c, const in float m_old, const in float m_new) {
    return m_old == MASKED ? 0.0 : exp2(m_old - m_new);
}
float cm2_prob(const in uint r, const in uint c, const in float x, const in float m) {
    return x == MASKED ? 0.0 : exp2(x - m);
}
float cm2_dropout(const in uint r, const in uint c, const in float p, const in uint kb) {
    return dropout_keeps(batch, row_head[r], row_query[r], kb + c) ? p * P.mask.keep_scale : 0.0;
}
// The end, per row (every column alike): the sink (not in SPLIT mode: combine.comp adds it), lse
// written once (column 0), and O's factor: NaN where the row is poisoned.
float cm2_finish(const in uint r, const in uint c, const in float l, const in float m) {
    float o_scale = 1.0, sink, l_row = l, m_row = m;
    if (!SPLIT && sink_logit(row_head[r], sink)) {
        sink *= LOG2E;
        const float m_all = max(m_row, sink);
        o_scale = m_row == MASKED ? 0.0 : exp2(m_row - m_all);
        l_row = l_row * o_scale + exp2(sink - m_all);
        m_row = m_all;
    }
    const bool poisoned = is_nan(l_row);
    if (c == 0u && row_lse_at[r] != 0xffffffffu)
        lse[row_lse_at[r]] = poisoned ? quiet_nan() : m_row == MASKED ? (SPLIT ? MASKED : negative_infinity()) : (m_row + log2(l_row)) * LN2;
    return poisoned ? quiet_nan() : l_row > 0.0 ? o_scale / l_row : 0.0;
}
float cm2_store(const in uint r, const in uint c, const in float value) {
    const uint col = P.first_column + c;
    if (row_out[r] != 0xffffffffu && col < P.shape.Dv) store_out(row_out[r] + col, value);
    return value;
}

void main() {
    const uint inv = gl_LocalInvocationIndex;
    const uint Hkv = P.shape.Hkv, group = P.shape.group;
    const uint Nq = P.shape.Nq, Nkv = P.shape.Nkv, Dk = P.shape.Dk, Dv = P.shape.Dv;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    batch = b;
    const uint rows_end = P.chunk.first_row + P.chunk.rows;
    // Row blocks in reverse, as flash.comp: the heaviest causal blocks start first.
    const uint block_rho = P.chunk.first_row + (gl_NumWorkGroups.x - 1u - gl_WorkGroupID.x) * BR;
    const uint q0 = q_base(b), len_q = q_length(b);
    const uint q_last = P.varlen.packed_q != 0u ? max(P.varlen.total_q, 1u) - 1u : 0xffffffffu;
    const uint split_index = SPLIT ? P.first_split + gl_WorkGroupID.z : 0u;
    const uint split_begin = SPLIT ? split_index * P.keys_per_split : 0u;
    const uint split_end = SPLIT ? min(Nkv, split_begin + P.keys_per_split) : Nkv;
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
        const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
        RowMask mask = row_mask(b, h, i);
        mask.first = max(mask.first, split_begin);
        mask.limit = min(mask.limit, split_end);
        row_first[r] = mask.first;
        row_limit[r] = mask.limit;
        if (elementwise) row_masks[r] = mask;
        row_head[r] = h;
        row_query[r] = i;
        row_q_at[r] = tensor_index(P.q, b, h, min(q0 + i, q_last));
        const bool stored = at < rows_end && at % Nq < len_q;
        const uint out_i = rho % Nq, out_row = SPLIT ? out_i : q0 + out_i;
        row_out[r] = stored ? tensor_index(P.o, b, h, out_row) + split_index * P.o_split_stride : 0xffffffffu;
        row_lse_at[r] = stored && P.first_column == 0u ? tensor_index(P.lse, b, h, out_row) + split_index * P.lse_split_stride
                                                       : 0xffffffffu;
        if (stored && mask.first < mask.limit) {
            SHARED_ATOMIC_MIN(wg_first, mask.first);
            SHARED_ATOMIC_MAX(wg_end, mask.limit);
        }
        SHARED_ATOMIC_MAX(wg_hi_first, mask.first);
        SHARED_ATOMIC_MIN(wg_lo_limit, mask.limit);
    }
    barrier();
    const uint k_begin = wg_first, k_end = wg_end, hi_all = wg_hi_first, lo_all = wg_lo_limit;

    // Q as the products' A operand: through an fp32 accumulator (the type and use llama.cpp's coopmat2
    // shader loads Q as), rounded to the operands' type as it converts.
    WG_FILLED(q_acc, BR, DKP, 0.0);
    WG_MAP0(q_acc, q_acc, BR, DKP, cm2_q_element);
    WG_TO_OPERAND(q_op, BR, DKP, gl_MatrixUseA, q_acc);

    // K's and V's rows of this head: keys past the call's (or the packed sequence's, or a paged
    // cache's) last read as 0, columns past Dk (Dv) too.
#ifdef PAGED
    const uint key_last = max(k_end, 1u) - 1u;  // the block table holds nothing past the sequence
#else
    const uint key_last = P.varlen.packed_k != 0u ? max(k_end, 1u) - 1u : max(split_end, 1u) - 1u;
#endif
    const uint k0_row = k_base(b);
    const uint k_head = tensor_index(P.k, b, hk, k0_row), v_head = tensor_index(P.v, b, hk, k0_row);
#ifdef STAGED
    const uint k_stride = P.k.stride.z, v_stride = P.v.stride.z;  // K_ROW's, V_ROW's (common/paged_rows.glsl)
    if (is_fp8(K_TYPE)) k_scale = head_terms[2u * P.shape.Hq + hk];
    if (is_fp8(V_TYPE)) v_scale = head_terms[2u * P.shape.Hq + Hkv + hk];
// A tile of BC keys from key kb_ into kv_stage as operands, 4 elements an invocation a trip through the
// typed loaders: row r, `pitch` elements from row r − 1, holds elements [first, first + run) of key
// kb_ + r's row; zeros past D and past key_last.
#define STAGE_TILE(ROW, LOAD4, run, pitch, first, D, kb_)                              \
    barrier();                                                                          \
    for (uint e = inv; e < BC * (run) / 4u; e += WG) {                                  \
        const uint key = e / ((run) / 4u), d = (first) + 4u * (e % ((run) / 4u));       \
        vec4 x = vec4(0.0);                                                              \
        if ((kb_) + key <= key_last && d < (D)) {                                        \
            const uvec2 at = ROW((kb_) + key);                                           \
            x = LOAD4(at.x, at.y + d, (D) - d);                                          \
        }                                                                                \
        WG_STAGE_PUT4(kv_stage, key * (pitch) + d - (first), x);                         \
    }                                                                                    \
    barrier()
#else
    WG_LAYOUT(k_layout, key_last + 1u, Dk, P.k.stride.z);
    WG_LAYOUT(v_layout, key_last + 1u, Dv, P.v.stride.z);
    WG_TRANSPOSED(transposed);
#endif

    WG_FILLED(m, BR, RW, MASKED);
    WG_FILLED(l, BR, RW, 0.0);
    WG_FILLED(o, BR, OC, 0.0);
    const bool dropout = P.mask.drop_threshold != 0u;
    for (uint kb = k_begin; kb < k_end; kb += BC) {
#ifdef STAGED
        STAGE_TILE(K_ROW, load_k4, DKP, K_PITCH, 0u, Dk, kb);
        WG_LOAD_STAGED(k_op, DKP, BC, gl_MatrixUseB, kv_stage, K_PITCH, WG_COLUMN_MAJOR);
#else
        WG_LOAD_VIEW(k_op, DKP, BC, gl_MatrixUseB, k_halves, k_head, k_layout, kb, BC, 0, DKP, transposed);
#endif
        WG_FILLED(s, BR, BC, 0.0);
        WG_PRODUCT(s, q_op, k_op, BR, DKP, BC);
        const bool whole = !elementwise && kb >= hi_all && kb + BC <= lo_all;
        WG_MAP2(s, s, BR, BC, cm2_logit, kb, whole ? 1u : 0u);

        WG_ACC(tile_max, BR, RW);
        WG_ROW_REDUCE(tile_max, RW, s, BR, BC, cm2_max);
        WG_ACC(m_new, BR, RW);
        WG_MAP_M(m_new, tile_max, BR, RW, cm2_max2, m);
        WG_ACC(alpha, BR, RW);
        WG_MAP_M(alpha, m, BR, RW, cm2_alpha, m_new);
        WG_ACC(m_wide, BR, BC);
        WG_ROW_REDUCE(m_wide, BC, m_new, BR, RW, cm2_first);
        WG_ACC(p, BR, BC);
        WG_MAP_M(p, s, BR, BC, cm2_prob, m_wide);
        WG_ACC(row_sum, BR, RW);
        WG_ROW_REDUCE(row_sum, RW, p, BR, BC, cm2_add);
        WG_SCALE_ADD(l, alpha, row_sum, BR, RW);
        WG_COPY(m, m_new, BR, RW);
        if (dropout) WG_MAP1(p, p, BR, BC, cm2_dropout, kb);  // after l: the sum is of the kept and dropped alike

        WG_ACC(alpha_o, BR, OC);
        WG_ROW_REDUCE(alpha_o, OC, alpha, BR, RW, cm2_first);
        WG_SCALE(o, alpha_o, BR, OC);
        WG_TO_OPERAND(p_op, BR, BC, gl_MatrixUseA, p);
#ifdef STAGED
        STAGE_TILE(V_ROW, load_v4, OC, V_PITCH, P.first_column, Dv, kb);  // every invocation is done with K's tile
        WG_LOAD_STAGED(v_op, BC, OC, gl_MatrixUseB, kv_stage, V_PITCH, WG_ROW_MAJOR);
#else
        WG_LOAD(v_op, BC, OC, gl_MatrixUseB, v_halves, v_head, v_layout, kb, BC, P.first_column, OC);
#endif
        WG_PRODUCT(o, p_op, v_op, BR, BC, OC);
    }

    WG_ACC(factor, BR, RW);
    WG_MAP_M(factor, l, BR, RW, cm2_finish, m);
    WG_ACC(factor_o, BR, OC);
    WG_ROW_REDUCE(factor_o, OC, factor, BR, RW, cm2_first);
    WG_SCALE(o, factor_o, BR, OC);
    WG_MAP0(o, o, BR, OC, cm2_store);
}

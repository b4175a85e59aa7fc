#version 450
// Fused attention with FlashAttention-2's work partition on the FP32 units (issue #32;
// docs/design/GPU_KERNELS.md "Prefill"): the GPU prefill kernel, with flash.comp's bindings and
// parameters (and its SPLIT mode), so the fused driver runs either.
//
// Work layout:
//   workgroup = NSG subgroups of SG lanes, Br = NSG·RG·TR query rows (ρ = g·Nq + i over the group's
//   query heads, as flash.comp's). A subgroup's lanes are RG row groups × KG key groups: lane
//   (rg, kg) holds a TR × TC micro-tile of S, rows rg·TR.. of its subgroup and keys kg·TC.. of the
//   key tile (Bc = KG·TC keys), and the O of its TR rows for the 4 columns 4·kg.. of every V chunk.
//   The subgroups never talk inside the key loop; the lanes of a row group meet only in the row's
//   max and sum (log2(KG) subgroupShuffleXor).
//   Tiles live in shared memory as fp32, loaded once per workgroup with the typed loaders (every
//   storage type dequantizes as it is stored):
//     Q and K in chunks of DC dimensions, transposed ([d][row], [d][key]): a lane's step over d
//     reads its TR rows as one vec4 and its TC keys as TC/4 vec4s, TR·TC FMAs for 1 + TC/4 reads;
//     P transposed ([key][row]), V in chunks of VC = 4·KG columns ([key][column]): a lane's step over
//     keys reads its TR probabilities and 4 columns as two vec4s, 4·TR FMAs.
//   Q is reloaded with each K chunk: fp32 Q of Br rows and all of Dk would not fit with the others.
//   Online softmax per row: m = max(m_old, tile max); α = 2^(m_old − m); l = l·α + Σ p; O = O·α + P·V.
// Key tiles outside every row's range [first, limit) are never visited (causal costs half, a window
// its width); tiles inside every row's range skip the per-score test unless masks or ALiBi are
// bound. Masks, softcap, ALiBi, sinks, dropout, varlen and paged K/V follow flash.comp and
// common/mask.glsl; heads wider than OC columns take column passes (P.first_column).
// A row with no visible key keeps m = MASKED: O = 0, lse = −∞ (or its sink); NaN scores poison the
// row; a subgroup size other than SG writes NaN.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/flash_params.glsl"
#include "common/shared_atomics.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint SG = 32;     // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint TR = 4;      // rows per lane (a multiple of 4)
layout(constant_id = 3) const uint TC = 8;      // keys per lane (a multiple of 4)
layout(constant_id = 4) const uint KG = 8;      // key groups: lanes sharing a row group
layout(constant_id = 5) const bool SPLIT = false;
layout(constant_id = 6) const uint NSG = 4;     // subgroups per workgroup
layout(constant_id = 7) const uint DC = 32;     // dimensions of Q and K per chunk
layout(constant_id = 9) const uint OC = 128;    // columns per pass (a multiple of 4·KG)
#ifdef PAGED
layout(constant_id = 10) const uint POOLS = 1;
#endif
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;
const uint RG = SG / KG;             // row groups per subgroup
const uint BR = NSG * RG * TR;       // rows per workgroup
const uint BC = KG * TC;             // keys per tile
const uint WG = NSG * SG;
const uint VC = 4u * KG;             // columns of V per chunk: a vec4 per lane
const uint VCHUNKS = OC / VC;
const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;

#include "common/tile_operands.glsl"

// Q's and K's chunks are stored transposed, two lanes per row (a row's 32 bytes, one sector) and
// 16 rows per warp; a pitch of 4 past the row puts the two lanes' stores 4 k-rows apart, 16 banks
// (4·(BR + 4) ≡ 16 words mod 32 for BR a multiple of 8), so a warp's 32 stores hit 32 banks where
// the unpadded [d][row] layout hit 4 (8-way conflicts). Rows stay 16-byte aligned for vec4 reads.
const uint PITCH_Q = BR + 4u, PITCH_K = BC + 4u;
const uint LANES_PER_ROW = DC >= 8u ? 2u : 1u;  // of DC/4 vec4s per row (1 where DC shrank to 4)
// Each invocation's loads of a chunk of Q, K and V: vec4s, WG a step.
const uint Q_STEPS = (BR * DC / 4u + WG - 1u) / WG, K_STEPS = (BC * DC / 4u + WG - 1u) / WG;
const uint V_STEPS = (BC * VC / 4u + WG - 1u) / WG;
shared float q_tile[DC * PITCH_Q];  // [d][row]
shared float k_tile[DC * PITCH_K];  // [d][key]
shared float p_tile[BC * BR];   // [key][row]
shared float v_tile[BC * VC];   // [key][column]
shared uint wg_first, wg_end;   // the workgroup's key range

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, inv = gl_LocalInvocationIndex;
    const uint rg = lane / KG, kg = lane % KG;
    const uint Hkv = P.shape.Hkv, group = P.shape.group;
    const uint Nq = P.shape.Nq, Nkv = P.shape.Nkv, Dk = P.shape.Dk, Dv = P.shape.Dv;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    if (is_fp8(K_TYPE)) k_scale = head_terms[2u * P.shape.Hq + hk];
    if (is_fp8(V_TYPE)) v_scale = head_terms[2u * P.shape.Hq + Hkv + hk];
    const uint rows_end = P.chunk.first_row + P.chunk.rows;
    // Row blocks in reverse, as flash.comp: the heaviest causal blocks start first.
    const uint row_block = gl_NumWorkGroups.x - 1u - gl_WorkGroupID.x;
    const uint block_rho = P.chunk.first_row + row_block * BR;
    const uint row0 = (sg * RG + rg) * TR;  // this lane's first row in the workgroup's
    const uint q0 = q_base(b), len_q = q_length(b);
    const uint q_last = P.varlen.packed_q != 0u ? max(P.varlen.total_q, 1u) - 1u : 0xffffffffu;

    const uint split_index = SPLIT ? P.first_split + gl_WorkGroupID.z : 0u;
    uint split_begin = 0u, split_end = Nkv;
    if (SPLIT) {
        split_begin = split_index * P.keys_per_split;
        split_end = min(Nkv, split_begin + P.keys_per_split);
    }

    // The lane's rows: their key ranges and whether any is stored.
    uint first[TR], limit[TR];
    uint lo_first = 0xffffffffu, hi_limit = 0u;
    bool has_rows = false;
    [[unroll]] for (uint r = 0u; r < TR; ++r) {
        const uint rho = min(block_rho + row0 + r, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
        const RowMask mask = row_mask(b, h, i);
        first[r] = max(mask.first, split_begin);
        limit[r] = min(mask.limit, split_end);
        lo_first = min(lo_first, first[r]);
        hi_limit = max(hi_limit, limit[r]);
        has_rows = has_rows || (block_rho + row0 + r < rows_end && (block_rho + row0 + r) % Nq < len_q);
    }
    // The workgroup's key range: the union of its stored rows' (every invocation meets every barrier).
    if (inv == 0u) {
        wg_first = 0xffffffffu;
        wg_end = 0u;
    }
    barrier();
    if (has_rows && lo_first < hi_limit) {
        SHARED_ATOMIC_MIN(wg_first, lo_first);
        SHARED_ATOMIC_MAX(wg_end, hi_limit);
    }
    barrier();
    const uint k_begin = wg_first, k_end = wg_end;
    uint lo_all = k_end, hi_all = k_begin;  // every lane's rows: for the test-free tiles
    [[unroll]] for (uint r = 0u; r < TR; ++r) {
        hi_all = max(hi_all, first[r]);
        lo_all = min(lo_all, limit[r]);
    }
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float scale = P.scale, scale2 = P.scale * LOG2E, keep_scale = P.mask.keep_scale;
#ifdef PAGED
    const uint key_last = max(k_end, 1u) - 1u;
#else
    const uint key_last = P.varlen.packed_k != 0u ? max(k_end, 1u) - 1u : max(split_end, 1u) - 1u;
#endif
    const uint k0_row = k_base(b);
    const uint k_head = tensor_index(P.k, b, hk, k0_row), k_stride = P.k.stride.z;
    const uint v_head = tensor_index(P.v, b, hk, k0_row), v_stride = P.v.stride.z;
    const uint col_base = P.first_column;

    float m[TR], l[TR];
    vec4 o[TR][VCHUNKS];
    [[unroll]] for (uint r = 0u; r < TR; ++r) {
        m[r] = MASKED;
        l[r] = 0.0;
        [[unroll]] for (uint c = 0u; c < VCHUNKS; ++c) o[r][c] = vec4(0.0);
    }

    // Key tiles; the outer loop keeps every trip count far below lavapipe's 65,535.
    for (uint kb0 = k_begin; kb0 < k_end; kb0 += 4096u * BC)
    for (uint kb = kb0; kb < min(k_end, kb0 + 4096u * BC); kb += BC) {
        float s[TR][TC];
        [[unroll]] for (uint r = 0u; r < TR; ++r)
            [[unroll]] for (uint c = 0u; c < TC; ++c) s[r][c] = 0.0;
        for (uint d0 = 0u; d0 < Dk; d0 += DC) {
            // The chunk's Q and K loads, all issued (while other lanes finish the previous chunk)
            // before the first store: a chunk waits on memory once, not once per step.
            vec4 qx[Q_STEPS], kx[K_STEPS];
            for (uint st = 0u; st < Q_STEPS; ++st) {
                const uint e = inv + st * WG, rest = e / LANES_PER_ROW, row = rest % BR;
                const uint d = d0 + 4u * (LANES_PER_ROW * (rest / BR) + e % LANES_PER_ROW);
                const uint rho = min(block_rho + row, rows_end - 1u);
                const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
                qx[st] = e < BR * DC / 4u && d < Dk ? load_q4(tensor_index(P.q, b, h, min(q0 + i, q_last)) + d, Dk - d) : vec4(0.0);
            }
            for (uint st = 0u; st < K_STEPS; ++st) {
                const uint e = inv + st * WG, rest = e / LANES_PER_ROW, key = rest % BC;
                const uint d = d0 + 4u * (LANES_PER_ROW * (rest / BC) + e % LANES_PER_ROW);
                const uvec2 at = K_ROW(min(kb + key, key_last));
                kx[st] = e < BC * DC / 4u && d < Dk ? load_k4(at.x, at.y + d, Dk - d) : vec4(0.0);
            }
            barrier();  // every lane is done with the previous chunk's (and tile's) tiles
            for (uint st = 0u; st < Q_STEPS; ++st) {
                const uint e = inv + st * WG, rest = e / LANES_PER_ROW, row = rest % BR;
                const uint d = 4u * (LANES_PER_ROW * (rest / BR) + e % LANES_PER_ROW);
                if (e < BR * DC / 4u) [[unroll]] for (uint c = 0u; c < 4u; ++c) q_tile[(d + c) * PITCH_Q + row] = qx[st][c];
            }
            for (uint st = 0u; st < K_STEPS; ++st) {
                const uint e = inv + st * WG, rest = e / LANES_PER_ROW, key = rest % BC;
                const uint d = 4u * (LANES_PER_ROW * (rest / BC) + e % LANES_PER_ROW);
                if (e < BC * DC / 4u) [[unroll]] for (uint c = 0u; c < 4u; ++c) k_tile[(d + c) * PITCH_K + key] = kx[st][c];
            }
            barrier();
            for (uint d = 0u; d < DC; ++d) {
                float qv[TR], kv[TC];
                [[unroll]] for (uint r = 0u; r < TR; ++r) qv[r] = q_tile[d * PITCH_Q + row0 + r];
                [[unroll]] for (uint c = 0u; c < TC; ++c) kv[c] = k_tile[d * PITCH_K + kg * TC + c];
                [[unroll]] for (uint r = 0u; r < TR; ++r)
                    [[unroll]] for (uint c = 0u; c < TC; ++c) s[r][c] += qv[r] * kv[c];
            }
        }

        // Scale into log2 units and mask (flash.comp's rules).
        const bool whole = !elementwise && kb >= hi_all && kb + BC <= lo_all;
        [[unroll]] for (uint r = 0u; r < TR; ++r) {
            const uint rho = min(block_rho + row0 + r, rows_end - 1u);
            const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
            RowMask mask;
            if (elementwise) {
                mask = row_mask(b, h, i);
                mask.limit = limit[r];
            }
            float tile_max = MASKED;
            [[unroll]] for (uint c = 0u; c < TC; ++c) {
                const uint key = kb + kg * TC + c;
                float x = capped ? softcap(s[r][c] * scale) * LOG2E : s[r][c] * scale2;
                if (elementwise) {
                    float terms;
                    x = key_terms(mask, key, terms) ? x + terms * LOG2E : MASKED;
                } else if (!whole && (key < first[r] || key >= limit[r])) {
                    x = MASKED;
                }
                s[r][c] = x;
                tile_max = max(tile_max, x);
            }
            [[unroll]] for (uint x = 1u; x < KG; x *= 2u) tile_max = max(tile_max, subgroupShuffleXor(tile_max, x));
            const float m_new = max(m[r], tile_max);
            const float alpha = m[r] == MASKED ? 0.0 : exp2(m[r] - m_new);
            m[r] = m_new;
            l[r] *= alpha;
            [[unroll]] for (uint c = 0u; c < VCHUNKS; ++c) o[r][c] *= alpha;
            [[unroll]] for (uint c = 0u; c < TC; ++c) {
                float p = s[r][c] == MASKED ? 0.0 : exp2(s[r][c] - m_new);
                l[r] += p;
                if (dropout) p = dropout_keeps(b, h, i, kb + kg * TC + c) ? p * keep_scale : 0.0;
                s[r][c] = p;
            }
        }
        // P into shared memory (the barrier below the V chunk's load orders it for every lane).
        [[unroll]] for (uint c = 0u; c < TC; ++c)
            [[unroll]] for (uint r = 0u; r < TR; ++r) p_tile[(kg * TC + c) * BR + row0 + r] = s[r][c];
        // O += P·V, VC columns at a time.
        [[unroll]] for (uint vc = 0u; vc < VCHUNKS; ++vc) {
            const uint c0 = col_base + vc * VC;
            vec4 vx[V_STEPS];  // the chunk's V loads, all issued before the first store
            for (uint st = 0u; st < V_STEPS; ++st) {
                const uint e = inv + st * WG, key = e / (VC / 4u), col = c0 + 4u * (e % (VC / 4u));
                const uvec2 at = V_ROW(min(kb + key, key_last));
                vx[st] = e < BC * VC / 4u && col < Dv ? load_v4(at.x, at.y + col, Dv - col) : vec4(0.0);
            }
            barrier();  // P is written; the previous chunk's V is read
            for (uint st = 0u; st < V_STEPS; ++st) {
                const uint e = inv + st * WG, key = e / (VC / 4u), col = 4u * (e % (VC / 4u));
                if (e < BC * VC / 4u) [[unroll]] for (uint c = 0u; c < 4u; ++c) v_tile[key * VC + col + c] = vx[st][c];
            }
            barrier();
            if (c0 < Dv)  // uniform: a pass's last chunks may lie past Dv
                for (uint key = 0u; key < BC; ++key) {
                    const vec4 v = vec4(v_tile[key * VC + 4u * kg], v_tile[key * VC + 4u * kg + 1u],
                                        v_tile[key * VC + 4u * kg + 2u], v_tile[key * VC + 4u * kg + 3u]);
                    [[unroll]] for (uint r = 0u; r < TR; ++r) o[r][vc] += p_tile[key * BR + row0 + r] * v;
                }
        }
    }

    // Finish: the row's sum over its KG lanes; the sink (not in split mode: combine.comp adds it);
    // normalise; store O (or the split's partial) and lse.
    [[unroll]] for (uint r = 0u; r < TR; ++r) {
        float l_row = l[r];
        [[unroll]] for (uint x = 1u; x < KG; x *= 2u) l_row += subgroupShuffleXor(l_row, x);
        const uint rho = block_rho + row0 + r;
        if (rho >= rows_end || rho % Nq >= len_q) continue;
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        const uint row = SPLIT ? i : q0 + i;
        float o_scale = 1.0, sink;
        float m_row = m[r];
        if (!SPLIT && sink_logit(h, sink)) {
            sink *= LOG2E;
            const float m_all = max(m_row, sink);
            o_scale = m_row == MASKED ? 0.0 : exp2(m_row - m_all);
            l_row = l_row * o_scale + exp2(sink - m_all);
            m_row = m_all;
        }
        const uint o_row = tensor_index(P.o, b, h, row) + split_index * P.o_split_stride;
        const bool poisoned = is_nan(l_row);
        const bool loud = gl_SubgroupSize != SG || poisoned;
        const float inv_l = l_row > 0.0 ? o_scale / l_row : 0.0;
        [[unroll]] for (uint vc = 0u; vc < VCHUNKS; ++vc)
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                const uint col = col_base + vc * VC + 4u * kg + c;
                if (col < Dv) store_out(o_row + col, loud ? quiet_nan() : o[r][vc][c] * inv_l);
            }
        if (kg == 0u && col_base == 0u)
            lse[tensor_index(P.lse, b, h, row) + split_index * P.lse_split_stride] =
                poisoned ? quiet_nan() : m_row == MASKED ? (SPLIT ? MASKED : negative_infinity()) : (m_row + log2(l_row)) * LN2;
    }
}

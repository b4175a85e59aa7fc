#version 450
// Split-KV decoding for GPUs (issue #31; docs/design/GPU_KERNELS.md "Decode"): the first kernel of
// a split run, as flash.comp's SPLIT mode and with its bindings and parameters, shaped for a step
// whose few query rows read a long K/V once at the memory's rate. combine.comp merges the splits.
//
// Work layout:
//   workgroup = (row block, unit = (b, key/value head hk), split): its R rows ρ = g·Nq + i are the
//   query heads of the group that share hk (GQA packed), so K/V are read once per group. Every one
//   of its NSG subgroups holds all R rows and walks its own keys of the split.
//   A key is LPK lanes' (KPS = SG / LPK keys side by side in a subgroup): lane j of a key holds
//   chunks t·LPK + j of its row (common/chunk_load.glsl: 16 bytes of f32/f16/bf16/fp8, half a ggml
//   block), TK of K and TV of V, so consecutive lanes read consecutive 16-byte words and a key's
//   row is LPK lanes' loads. The lane keeps Q for its K chunks and O for its V chunks, per row.
//   A step takes KPL keys per key slot: every K and V chunk of the step is fetched before any is
//   decoded (KPL·(TK + TV) loads in flight per lane); the lane's partial q·k sums reduce over the
//   LPK lanes of the key with log2(LPK) subgroupShuffleXor, after which every lane of the key holds
//   its scores and adds p·v into its own O columns: no shuffle in P·V.
//   The online softmax (m, l, O) is kept per lane over the keys it saw and merged once at the end:
//   across the subgroup's key slots by shuffles, across subgroups through shared memory, one row
//   at a time. The split's partial O (normalised) and lse go to the scratch combine.comp reads.
// Masks, softcap, ALiBi, dropout and key lengths follow flash.comp and common/mask.glsl (the sink
// joins in combine.comp); keys outside every row's range are never visited; paged K/V come through
// the block table (common/paged_rows.glsl); varlen rows from cu_seqlens.
// A row with no visible key keeps m = MASKED: its partial is O = 0, lse = MASKED. NaN scores poison
// the row (NaN O and lse), as in flash.comp; a subgroup size other than SG writes NaN.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/flash_params.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint SG = 32;     // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint R = 4;       // query rows per workgroup
layout(constant_id = 3) const uint LPK = 8;     // lanes per key (a power of two, ≤ SG)
layout(constant_id = 4) const uint KPL = 2;     // keys per key slot per step
layout(constant_id = 5) const uint TK = 2;      // K chunks per lane: ceil(Dk / (LPK · chunk))
layout(constant_id = 6) const uint NSG = 4;     // subgroups per workgroup
layout(constant_id = 7) const uint TV = 2;      // V chunks per lane
layout(constant_id = 8) const bool WIDE = true; // plain-type rows on 16 bytes: one uvec4 per chunk
#ifdef PAGED
layout(constant_id = 10) const uint POOLS = 1;  // K (and V) pools bound: 1 to 4
#endif
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;
const uint KPS = SG / LPK;                      // key slots per subgroup
const uint STEP = NSG * KPS * KPL;              // keys per workgroup step
const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;

float k_scale = 1.0, v_scale = 1.0;  // an fp8 K's and V's scales for this head, set in main
#define OL_NAME load_q4
#define OL_SLOT 1
#define OL_TYPE Q_TYPE
#include "common/operand_loader.glsl"
#define CL_NAME k0
#define CL_SLOT 2
#define CL_TYPE K_TYPE
#define CL_SCALE k_scale
#include "common/chunk_load.glsl"
#define CL_NAME v0
#define CL_SLOT 3
#define CL_TYPE V_TYPE
#define CL_SCALE v_scale
#include "common/chunk_load.glsl"
#ifdef PAGED
#define CL_NAME k1
#define CL_SLOT 10
#define CL_TYPE K_TYPE
#include "common/chunk_load.glsl"
#define CL_NAME k2
#define CL_SLOT 11
#define CL_TYPE K_TYPE
#include "common/chunk_load.glsl"
#define CL_NAME k3
#define CL_SLOT 12
#define CL_TYPE K_TYPE
#include "common/chunk_load.glsl"
#define CL_NAME v1
#define CL_SLOT 13
#define CL_TYPE V_TYPE
#include "common/chunk_load.glsl"
#define CL_NAME v2
#define CL_SLOT 14
#define CL_TYPE V_TYPE
#include "common/chunk_load.glsl"
#define CL_NAME v3
#define CL_SLOT 15
#define CL_TYPE V_TYPE
#include "common/chunk_load.glsl"
Chunk fetch_k(uint pool, uint index, uint valid) {
    if (POOLS == 1u || pool == 0u) return k0_fetch(index, valid);
    if (pool == 1u) return k1_fetch(index, valid);
    if (pool == 2u) return k2_fetch(index, valid);
    return k3_fetch(index, valid);
}
Chunk fetch_v(uint pool, uint index, uint valid) {
    if (POOLS == 1u || pool == 0u) return v0_fetch(index, valid);
    if (pool == 1u) return v1_fetch(index, valid);
    if (pool == 2u) return v2_fetch(index, valid);
    return v3_fetch(index, valid);
}
#else
Chunk fetch_k(uint pool, uint index, uint valid) { return k0_fetch(index, valid); }
Chunk fetch_v(uint pool, uint index, uint valid) { return v0_fetch(index, valid); }
#endif
const uint CK = CHUNK_ELEMENTS(K_TYPE), CV = CHUNK_ELEMENTS(V_TYPE);
const uint CK4 = CK / 4u, CV4 = CV / 4u;       // vec4s per chunk

layout(std430, set = 0, binding = 4) writeonly buffer PartialO { float partial_o[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Lse { float lse[]; };
layout(std430, set = 0, binding = 6) readonly buffer KvLengths { int kv_lengths[]; };
layout(std430, set = 0, binding = 7) readonly buffer BoolMask { uint bool_words[]; };
layout(std430, set = 0, binding = 8) readonly buffer FloatMask { float float_mask[]; };
layout(std430, set = 0, binding = 9) readonly buffer HeadTerms { float head_terms[]; };
layout(std430, set = 0, binding = 17) readonly buffer CuSeqlensQ { int cu_q[]; };
layout(std430, set = 0, binding = 18) readonly buffer CuSeqlensK { int cu_k[]; };

#define VARLEN
#include "common/mask.glsl"
#include "common/philox.glsl"
#include "common/paged_rows.glsl"

// One row's partial from every subgroup but the first, merged by the first (one row at a time):
// each key-slot-0 lane's O chunks, and the subgroup's m and l.
shared vec4 merge_o[NSG * LPK * TV * CV4];
shared vec2 merge_ml[NSG];

// Merging the (m, l, O) of two disjoint key sets of a row: the larger maximum and each side's
// weight, so that l = l·a + l2·a2 and O = O·a + O2·a2. A side that saw no visible key (m = MASKED)
// weighs 0; a NaN l stays NaN.
vec3 merge_weights(float m, float m2) {
    const float m_new = max(m, m2);
    return vec3(m_new, m == MASKED ? 0.0 : exp2(m - m_new), m2 == MASKED ? 0.0 : exp2(m2 - m_new));
}

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    const uint slot = lane / LPK, part = lane % LPK;  // key slot, and which chunks of the key
    const uint Hkv = P.shape.Hkv, group = P.shape.group;
    const uint Nq = P.shape.Nq, Nkv = P.shape.Nkv, Dk = P.shape.Dk, Dv = P.shape.Dv;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
    if (is_fp8(K_TYPE)) k_scale = head_terms[2u * P.shape.Hq + hk];
    if (is_fp8(V_TYPE)) v_scale = head_terms[2u * P.shape.Hq + Hkv + hk];
    const uint rows_end = P.chunk.first_row + P.chunk.rows;
    const uint rho0 = P.chunk.first_row + gl_WorkGroupID.x * R;
    const uint q0 = q_base(b), len_q = q_length(b);

    // This split's keys; loads clamp to its last (its binding always holds it).
    const uint split_index = P.first_split + gl_WorkGroupID.z;
    const uint split_begin = split_index * P.keys_per_split;
    const uint split_end = min(Nkv, split_begin + P.keys_per_split);

    // Rows ρ -> (h, i), their key ranges, and Q for this lane's K chunks (rows past the chunk or the
    // sequence repeat its last and are not stored).
    const uint q_last = P.varlen.packed_q != 0u ? max(P.varlen.total_q, 1u) - 1u : 0xffffffffu;
    uint first[R], limit[R];
    uint lo_first = 0xffffffffu, hi_first = 0u, lo_limit = 0xffffffffu, hi_limit = 0u;
    vec4 q[R][TK * CK4];
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint rho = min(rho0 + r, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
        const uint q_row = tensor_index(P.q, b, h, min(q0 + i, q_last));
        [[unroll]] for (uint t = 0u; t < TK; ++t)
            [[unroll]] for (uint e = 0u; e < CK4; ++e) {
                const uint d = (t * LPK + part) * CK + 4u * e;
                q[r][t * CK4 + e] = d < Dk ? load_q4(q_row + d, Dk - d) : vec4(0.0);
            }
        const RowMask mask = row_mask(b, h, i);
        first[r] = max(mask.first, split_begin);
        limit[r] = min(mask.limit, split_end);
        lo_first = min(lo_first, first[r]);
        hi_first = max(hi_first, first[r]);
        lo_limit = min(lo_limit, limit[r]);
        hi_limit = max(hi_limit, limit[r]);
    }
    const uint k_begin = max(split_begin, lo_first), k_end = min(split_end, hi_limit);
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float scale = P.scale, scale2 = P.scale * LOG2E, keep_scale = P.mask.keep_scale;
#ifdef PAGED
    const uint key_last = max(k_end, 1u) - 1u;  // the table need name no block past a length
#else
    const uint key_last = P.varlen.packed_k != 0u ? max(k_end, 1u) - 1u : max(split_end, 1u) - 1u;
#endif
    const uint k0_row = k_base(b);
    const uint k_head = tensor_index(P.k, b, hk, k0_row), k_stride = P.k.stride.z;
    const uint v_head = tensor_index(P.v, b, hk, k0_row), v_stride = P.v.stride.z;

    float m[R], l[R];
    vec4 o[R][TV * CV4];
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        m[r] = MASKED;
        l[r] = 0.0;
        [[unroll]] for (uint e = 0u; e < TV * CV4; ++e) o[r][e] = vec4(0.0);
    }

    // Steps of STEP keys: subgroup sg takes keys kb + (sg·KPL + c)·KPS + slot, c < KPL (a subgroup's
    // loads cover KPS consecutive keys). The outer loop keeps every trip count far below lavapipe's
    // 65,535 (the host cuts the keys of one dispatch below its budget).
    for (uint kb0 = k_begin; kb0 < k_end; kb0 += 4096u * STEP)
    for (uint kb = kb0; kb < min(k_end, kb0 + 4096u * STEP); kb += STEP) {
        uint key[KPL];
        Chunk kc[KPL][TK], vc[KPL][TV];
        [[unroll]] for (uint c = 0u; c < KPL; ++c) {
            key[c] = kb + (sg * KPL + c) * KPS + slot;
#ifdef PAGED
            const uvec2 where = paged_slot(b, min(key[c], key_last));  // one table read for K and V
            const uvec2 k_row = paged_index(P.k, hk, where), v_row = paged_index(P.v, hk, where);
#else
            const uvec2 k_row = K_ROW(min(key[c], key_last)), v_row = V_ROW(min(key[c], key_last));
#endif
            [[unroll]] for (uint t = 0u; t < TK; ++t) {
                const uint d = (t * LPK + part) * CK;
                kc[c][t] = fetch_k(k_row.x, k_row.y + d, d < Dk ? min(Dk - d, CK) : 0u);
            }
            [[unroll]] for (uint t = 0u; t < TV; ++t) {
                const uint d = (t * LPK + part) * CV;
                vc[c][t] = fetch_v(v_row.x, v_row.y + d, d < Dv ? min(Dv - d, CV) : 0u);
            }
        }

        // Scores: the lane's partial dot products, summed over the key's LPK lanes.
        float s[R][KPL];
        [[unroll]] for (uint c = 0u; c < KPL; ++c) {
            [[unroll]] for (uint r = 0u; r < R; ++r) s[r][c] = 0.0;
            [[unroll]] for (uint t = 0u; t < TK; ++t) {
                const uint d = (t * LPK + part) * CK;
                [[unroll]] for (uint e = 0u; e < CK4; ++e) {
                    const vec4 kv = k0_values(kc[c][t], d, e);
                    [[unroll]] for (uint r = 0u; r < R; ++r) s[r][c] += dot(q[r][t * CK4 + e], kv);
                }
            }
            [[unroll]] for (uint r = 0u; r < R; ++r)
                [[unroll]] for (uint x = 1u; x < LPK; x *= 2u) s[r][c] += subgroupShuffleXor(s[r][c], x);
        }

        // Scale into log2 units and mask (flash.comp's rules): no per-score test where the whole step
        // lies inside every row's range and no bool/float mask or ALiBi is bound.
        const bool whole = !elementwise && kb >= hi_first && kb + STEP <= lo_limit;
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            const uint rho = min(rho0 + r, rows_end - 1u);
            const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
            RowMask mask;
            if (elementwise) {
                mask = row_mask(b, h, i);
                mask.limit = limit[r];
            }
            float step_max = MASKED;
            [[unroll]] for (uint c = 0u; c < KPL; ++c) {
                float x = capped ? softcap(s[r][c] * scale) * LOG2E : s[r][c] * scale2;
                if (elementwise) {
                    float terms;
                    x = key_terms(mask, key[c], terms) ? x + terms * LOG2E : MASKED;
                } else if (!whole && (key[c] < first[r] || key[c] >= limit[r])) {
                    x = MASKED;
                }
                s[r][c] = x;
                step_max = max(step_max, x);
            }
            // Online softmax per lane: O and l rescale only when the maximum grows.
            const float m_new = max(m[r], step_max);
            if (m_new != m[r]) {
                const float alpha = m[r] == MASKED ? 0.0 : exp2(m[r] - m_new);
                m[r] = m_new;
                l[r] *= alpha;
                [[unroll]] for (uint e = 0u; e < TV * CV4; ++e) o[r][e] *= alpha;
            }
            [[unroll]] for (uint c = 0u; c < KPL; ++c) {
                float p = s[r][c] == MASKED ? 0.0 : exp2(s[r][c] - m_new);
                l[r] += p;
                // Dropout: the weight that multiplies V is dropped or rescaled; l keeps the softmax's.
                if (dropout) p = dropout_keeps(b, h, i, key[c]) ? p * keep_scale : 0.0;
                [[unroll]] for (uint t = 0u; t < TV; ++t) {
                    const uint d = (t * LPK + part) * CV;
                    [[unroll]] for (uint e = 0u; e < CV4; ++e) o[r][t * CV4 + e] += p * v0_values(vc[c][t], d, e);
                }
            }
        }
    }

    // Merge: the subgroup's key slots by shuffles (lanes with the same `part`), then the subgroups
    // through shared memory, one row at a time; the first subgroup's slot-0 lanes store the partial.
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        [[unroll]] for (uint x = LPK; x < SG; x *= 2u) {
            vec4 o2[TV * CV4];
            [[unroll]] for (uint e = 0u; e < TV * CV4; ++e)
                o2[e] = vec4(subgroupShuffleXor(o[r][e].x, x), subgroupShuffleXor(o[r][e].y, x),
                             subgroupShuffleXor(o[r][e].z, x), subgroupShuffleXor(o[r][e].w, x));
            const vec3 w = merge_weights(m[r], subgroupShuffleXor(m[r], x));
            m[r] = w.x;
            l[r] = l[r] * w.y + subgroupShuffleXor(l[r], x) * w.z;
            [[unroll]] for (uint e = 0u; e < TV * CV4; ++e) o[r][e] = o[r][e] * w.y + o2[e] * w.z;
        }
        if (NSG > 1u) {
            barrier();  // the previous row's merge has read the tiles
            if (sg > 0u && slot == 0u) {
                [[unroll]] for (uint e = 0u; e < TV * CV4; ++e) merge_o[(sg * LPK + part) * TV * CV4 + e] = o[r][e];
                if (part == 0u) merge_ml[sg] = vec2(m[r], l[r]);
            }
            barrier();
            if (sg == 0u && slot == 0u)
                for (uint other = 1u; other < NSG; ++other) {
                    const vec3 w = merge_weights(m[r], merge_ml[other].x);
                    m[r] = w.x;
                    l[r] = l[r] * w.y + merge_ml[other].y * w.z;
                    [[unroll]] for (uint e = 0u; e < TV * CV4; ++e)
                        o[r][e] = o[r][e] * w.y + merge_o[(other * LPK + part) * TV * CV4 + e] * w.z;
                }
        }
        if (sg != 0u || slot != 0u || rho0 + r >= rows_end || (rho0 + r) % Nq >= len_q) continue;
        const uint rho = rho0 + r;
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        const uint o_row = tensor_index(P.o, b, h, i) + split_index * P.o_split_stride;
        const bool poisoned = is_nan(l[r]);
        const bool loud = gl_SubgroupSize != SG || poisoned;  // NaN written, not computed
        const float inv = l[r] > 0.0 ? 1.0 / l[r] : 0.0;
        [[unroll]] for (uint t = 0u; t < TV; ++t)
            [[unroll]] for (uint e = 0u; e < CV4; ++e)
                [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                    const uint col = (t * LPK + part) * CV + 4u * e + c;
                    if (col < Dv) partial_o[o_row + col] = loud ? quiet_nan() : o[r][t * CV4 + e][c] * inv;
                }
        if (part == 0u)
            lse[tensor_index(P.lse, b, h, i) + split_index * P.lse_split_stride] =
                poisoned ? quiet_nan() : m[r] == MASKED ? MASKED : (m[r] + log2(l[r])) * LN2;
    }
}

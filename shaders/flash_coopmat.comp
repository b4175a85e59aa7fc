#version 450
// Fused attention with FlashAttention-2's work partition on cooperative 16 × 16 × 16 matrices
// (issue #33; docs/design/GPU_KERNELS.md "Cooperative matrices"): flash_tile.comp's contract
// (flash.comp's bindings and parameters, its SPLIT mode, every feature and storage type) with
// S = Q·Kᵀ and O += P·V as products of common/coopmat.glsl: the matrix units' where CM_KHR is
// defined, the portable implementation otherwise. Q, K, P and V are rounded to f16 (bf16 where
// CM_BF16 is defined: what this file says of f16 operands holds for bf16 ones) as they are staged;
// S and O accumulate in fp32.
//
// Work layout:
//   workgroup = NSG subgroups of SG lanes; each subgroup owns RT tiles of 16 query rows (Br =
//   16·RT·NSG, ρ as flash.comp's) and their O as OT · RT accumulators of 16 columns (OC = 16·OT per
//   column pass); with one row tile it holds its Q as DKT operands (read once), with two it reads
//   them from Q's own tile at every product.
//   Per key tile of BC keys: the workgroup stages K [key][d] as f16, with AHEAD from registers loaded
//   a phase earlier (during the previous tile's P·V; V's during S and the softmax: STEPS chunks of 8
//   per invocation, one uvec4 each where WIDE); each subgroup multiplies its Q by BC/16 column blocks
//   of Kᵀ (two chains of products: even and odd d-tiles, or the two row tiles) and stores S to its
//   own fp32 tile, where its lanes (SLANES per row, SROWS rows each) apply scale, softcap, masks,
//   ALiBi and dropout and the online softmax, writing P as f16. Rows whose maximum moved rescale O:
//   their factors go to shared memory as a 16 × 16 tile per row tile (a row's factor in every
//   column), come back as accumulators, and O's accumulators are multiplied by them element by
//   element (the units' element order stays theirs). Then the workgroup stages V [key][column] where
//   K was, and each subgroup adds P·V to O (common/coopmat_o_tiles.glsl). With KV_APART V has a
//   tile of its own, staged with K at the key tile's start, both a whole tile ahead, and the two
//   barriers before P·V are one subgroup's (common/coopmat_kv_staging.glsl).
//   The end stores O through the subgroup's shared tile, 16 columns at a time, normalised by l.
// Key tiles outside every row's range are never visited; masks, softcap, ALiBi, sinks, dropout,
// varlen and paged K/V follow flash_tile.comp and common/mask.glsl; heads wider than OC columns
// take column passes (P.first_column). A row with no visible key keeps m = MASKED: O = 0,
// lse = −∞ (or its sink); NaN scores poison the row; a subgroup layout other than the pipeline's
// (SG lanes, NSG subgroups) writes NaN.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/flash_params.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint CM_SG = 32;  // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint BC = 64;     // keys per tile, a multiple of 16
layout(constant_id = 3) const uint DKT = 8;     // Q's and K's 16-dimension tiles: ceil(Dk / 16)
layout(constant_id = 4) const uint OT = 8;      // O's 16-column tiles per pass
layout(constant_id = 5) const bool SPLIT = false;
layout(constant_id = 6) const uint NSG = 4;     // subgroups per workgroup
#ifdef PAGED
layout(constant_id = 10) const uint POOLS = 1;
#endif
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;
layout(constant_id = 14) const bool WIDE = false;  // K/V stored as the operands, dense, every row on 16 bytes: a chunk is one uvec4
layout(constant_id = 15) const bool AHEAD = true;  // K/V a phase ahead in registers (CoopmatLayout::ahead)
layout(constant_id = 16) const bool O_NAMED = false;  // O as named accumulators (CoopmatLayout::named)
layout(constant_id = 17) const uint RT = 1;           // 16-row tiles per subgroup, 1 or 2 (CoopmatLayout::row_tiles)
layout(constant_id = 18) const bool Q_SHARED = false; // Q read from its own tile with one row tile too (CoopmatLayout::q_in_shared)
layout(constant_id = 19) const bool KV_APART = false; // K and V in tiles of their own (CoopmatLayout::kv_apart)

#include "common/coopmat.glsl"
#include "common/shared_atomics.glsl"

const uint SG = CM_SG;
const uint SGR = 16u * RT;                      // rows per subgroup
const uint BR = SGR * NSG;                      // rows per workgroup
const uint OTR = OT * RT;                       // O's accumulators: [column tile][row tile]
const bool Q_OWN = RT > 1u || Q_SHARED;         // Q's operands from Q's own tile at every product
const uint KT = BC / 16u;                       // S's 16-key tiles
const uint DKP = 16u * DKT, OC = 16u * OT;      // Q's and K's dimensions, O's columns, padded
const uint WG = NSG * SG;
const uint SLANES = SG >= 16u ? SG / 16u : 1u;  // softmax lanes per row
const uint SROWS = SG >= 16u ? RT : SGR / SG;   // softmax rows per lane
const uint SKEYS = BC / SLANES;                 // a softmax lane's keys of a row
// A softmax lane's key c of its row: pairs of adjacent keys, the row's SLANES lanes taking turns
// (so that P goes out two f16 at a time).
#define KEY_LOCAL(c) ((((c) / 2u) * SLANES + part) * 2u + (c) % 2u)
const uint SCOLS = 16u / SLANES;                // a lane's columns of a row in a 16-column tile
const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;

#include "common/tile_operands.glsl"
// K's and V's bindings again as 16-byte words, for the WIDE loads (Vulkan lets variables alias a binding).
layout(std430, set = 0, binding = 2) readonly buffer KWords4 { uvec4 k_words4[]; };
layout(std430, set = 0, binding = 3) readonly buffer VWords4 { uvec4 v_words4[]; };

// The softmax's loops over a lane's keys: the compiler's choice on the units, where unrolled they
// held 32 more registers (session 22's statistics); loops in the portable implementation, as the
// backward's are: unrolled, every key of a lane took its own copy of the mask model and of dropout's
// Philox rounds (64 of each at 32-key tiles on 8 lanes), and lavapipe compiled each pipeline for
// about 15 s. Its loop budget counts them (coopmat_loops_per_tile).
#ifdef CM_KHR
#define SOFTMAX_LOOP
#else
#define SOFTMAX_LOOP [[dont_unroll]]
#endif

// K's and V's tile (and Q's at the start, where Q is held, BC rows at a time): rows of max(DKP,
// OC) elements and 8 more, so rows start 16 bytes apart on different banks, staged 8 elements (16
// bytes on the units) per store. With Q_OWN (always with two row tiles) Q has a tile of its own,
// read at every product of S: held, two row tiles' 2·DKT operands beside 8 named accumulators
// would be D 128's live state at one row tile, which computed wrong on NVIDIA's driver (session
// 26; Q's own tile validated there). S (fp32) and P (f16 operands, written in pairs of keys) per
// subgroup, SGR rows each.
const uint KV_ROWS = BC;
const uint PITCH_KV = (KV_APART || DKP > OC ? DKP : OC) + 8u, PITCH_V = OC + 8u, PITCH_Q = DKP + 8u;
const uint PITCH_S = BC + 4u, PITCH_P = BC + 8u;
CM_OPERAND_TILE(kv_tile, KV_ROWS * PITCH_KV);            // [key or row][d or column]
CM_OPERAND_TILE(q_tile, Q_OWN ? BR * PITCH_Q : 8u);      // [row][d], with Q_OWN
CM_OPERAND_TILE(v_tile, KV_APART ? BC * PITCH_V : 8u);   // [key][column], with KV_APART
CM_ACC_TILE(s_tile, BR * PITCH_S);             // [subgroup][row][key]
CM_OPERAND_TILE(p_tile, BR * PITCH_P);         // [subgroup][row][key]
shared uint wg_first, wg_end;                 // the workgroup's key range

#include "common/coopmat_kv_staging.glsl"
#include "common/coopmat_o_tiles.glsl"

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, inv = gl_LocalInvocationIndex;
    const uint part = lane % SLANES;  // which of its row's softmax lanes this one is
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
    const uint q0 = q_base(b), len_q = q_length(b);
    const uint q_last = P.varlen.packed_q != 0u ? max(P.varlen.total_q, 1u) - 1u : 0xffffffffu;
    const uint s_base = sg * SGR * PITCH_S, p_base = sg * SGR * PITCH_P, q_rows = sg * SGR * PITCH_Q;

    const uint split_index = SPLIT ? P.first_split + gl_WorkGroupID.z : 0u;
    uint split_begin = 0u, split_end = Nkv;
    if (SPLIT) {
        split_begin = split_index * P.keys_per_split;
        split_end = min(Nkv, split_begin + P.keys_per_split);
    }

    // The lane's softmax rows (row t: local_row(t) of its subgroup's SGR): key ranges, stored or not.
    uint local_row[SROWS], first[SROWS], limit[SROWS];
    uint lo_first = 0xffffffffu, hi_limit = 0u;
    bool has_rows = false;
    [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
        local_row[t] = lane / SLANES + t * (SG / SLANES);
        const uint at = block_rho + sg * SGR + local_row[t];
        const uint rho = min(at, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
        const RowMask mask = row_mask(b, h, i);
        first[t] = max(mask.first, split_begin);
        limit[t] = min(mask.limit, split_end);
        lo_first = min(lo_first, first[t]);
        hi_limit = max(hi_limit, limit[t]);
        has_rows = has_rows || (at < rows_end && at % Nq < len_q);
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
    // Q's rows into Q's own tile (Q_OWN); or through K's tile into registers, each subgroup's DKT
    // operands, in passes of BC rows (each between two barriers; a subgroup's 16 rows lie in one
    // pass, as BC is a multiple of 16), so that K's tile needs no more rows than its keys however
    // many subgroups share it.
    CmA q_ops[DKT];
    for (uint pass_row = 0u; pass_row < BR; pass_row += Q_OWN ? BR : BC) {
        const uint pass_rows = Q_OWN ? BR : min(BC, BR - pass_row);
        for (uint e = inv; e < pass_rows * DKP / 8u; e += WG) {
            const uint row = e / (DKP / 8u), d = 8u * (e % (DKP / 8u));
            const uint rho = min(block_rho + pass_row + row, rows_end - 1u);
            const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
            const uint at = tensor_index(P.q, b, h, min(q0 + i, q_last)) + d;
            CM_ELEM4 lo, hi;
            CM_FETCH8(load_q4, at, d, Dk, lo, hi);
            if (Q_OWN) {
                CM_PUT8(q_tile, row * PITCH_Q + d, lo, hi);
            } else {
                CM_PUT8(kv_tile, row * PITCH_KV + d, lo, hi);
            }
        }
        barrier();
        if (!Q_OWN && sg * 16u - pass_row < pass_rows) {  // uniform per subgroup
            CM_LOOP for (uint dt = 0u; dt < DKT; ++dt)
                CM_LOAD_A(q_ops[dt], kv_tile, (sg * 16u - pass_row) * PITCH_KV + 16u * dt, PITCH_KV);
        }
        if (!Q_OWN && pass_row + BC < BR) barrier();  // every pass's subgroups have their operands
    }
    // Row tile r_'s Q operand of d-tile d_: held, or from Q's tile.
#define Q_OPERAND(name, r_, d_)                                                                \
    CmA name;                                                                                  \
    if (Q_OWN) {                                                                               \
        CM_LOAD_A(name, q_tile, q_rows + 16u * (r_) * PITCH_Q + 16u * (d_), PITCH_Q);          \
    } else {                                                                                   \
        CM_COPY_A(name, q_ops[d_]);                                                            \
    }

    const uint k_begin = wg_first, k_end = wg_end;
    // The keys every row of the subgroup sees: tiles inside them skip the range test. Subgroup-wide,
    // so that the test-free path is uniform and the softmax below branches on no lane's own rows.
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

    STAGE_BEGIN(k_begin)

    float m[SROWS], l[SROWS];
    [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
        m[t] = MASKED;
        l[t] = 0.0;
    }
    CmAcc o[OTR];
    // One declaration each: glslang 13 gives later declarators of a coopmat type no matrix use.
    CmAcc o0;
    CmAcc o1;
    CmAcc o2;
    CmAcc o3;
    CmAcc o4;
    CmAcc o5;
    CmAcc o6;
    CmAcc o7;
    O_TILES(O_FILL)

    // Key tiles; the outer loop keeps every trip count far below lavapipe's 65,535.
    for (uint kb0 = k_begin; kb0 < k_end; kb0 += 4096u * BC)
    for (uint kb = kb0; kb < min(k_end, kb0 + 4096u * BC); kb += BC) {
        STAGE_KEYS(kb)
        // S = Q·Kᵀ, 16 keys at a time, into the subgroup's fp32 tile. The key blocks stay a loop
        // (only the operand arrays' loops unroll): unrolled, NVIDIA's compiler hoisted every
        // block's K operands and ran out of registers (255 and spills; session 22's statistics).
        // Two accumulators so that two chains of products are in flight: one row tile's even and
        // odd d-tiles, summed; or each row tile's own, every K operand feeding both.
        [[dont_unroll]] for (uint kt = 0u; kt < KT; ++kt) {
            CmAcc s;
            CM_FILL(s, 0.0);
            CmAcc s_odd;
            CM_FILL(s_odd, 0.0);
            CM_LOOP for (uint dt = 0u; dt < DKT; dt += 3u - RT) {
                CmB k_op;
                CM_LOAD_BT(k_op, kv_tile, 16u * kt * PITCH_KV + 16u * dt, PITCH_KV);
                Q_OPERAND(q_op, 0u, dt);
                CM_MUL_ADD(s, q_op, k_op, kv_tile);
                if (RT > 1u) {
                    Q_OPERAND(q_bottom, 1u, dt);
                    CM_MUL_ADD(s_odd, q_bottom, k_op, kv_tile);
                } else if (dt + 1u < DKT) {
                    CmB k_op_odd;
                    CM_LOAD_BT(k_op_odd, kv_tile, 16u * kt * PITCH_KV + 16u * (dt + 1u), PITCH_KV);
                    Q_OPERAND(q_odd, 0u, dt + 1u);
                    CM_MUL_ADD(s_odd, q_odd, k_op_odd, kv_tile);
                }
            }
            if (RT > 1u) {
                CM_STORE(s_odd, s_tile, s_base + 16u * PITCH_S + 16u * kt, PITCH_S);
            } else {
                CM_ADD(s, s_odd);
            }
            CM_STORE(s, s_tile, s_base + 16u * kt, PITCH_S);
        }
        CM_SUBGROUP_SYNC();

        // Scale into log2 units, mask (flash.comp's rules), online softmax; P into the subgroup's tile.
        // Per-lane choices are selects (mix with a bool), not branches: the shuffles and the
        // subgroup maximum below then follow no divergent code (docs/design/GPU_KERNELS.md,
        // "Reconvergence"); only key_terms' lookups branch, where masks are elementwise.
        const bool whole = !elementwise && kb >= hi_all && kb + BC <= lo_all;
        float alpha[SROWS];
        bool moved = false;
        [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
            const uint rho = min(block_rho + sg * SGR + local_row[t], rows_end - 1u);
            const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
            RowMask mask;
            if (elementwise) {
                mask = row_mask(b, h, i);
                mask.limit = limit[t];
            }
            // The masked logits go back over the scores in the lane's own entries of the tile (no
            // barrier: each lane rereads only what it wrote) rather than into SKEYS registers.
            float tile_max = MASKED;
            SOFTMAX_LOOP for (uint c = 0u; c < SKEYS; ++c) {
                const uint key_local = KEY_LOCAL(c), key = kb + key_local;
                const uint at = s_base + local_row[t] * PITCH_S + key_local;
                const float score = CM_AT(s_tile, at);
                float v = capped ? softcap(score * scale) * LOG2E : score * scale2;
                if (elementwise) {
                    float terms;
                    const bool visible = key_terms(mask, key, terms);
                    v = mix(MASKED, v + terms * LOG2E, visible);
                } else if (!whole) {
                    v = mix(v, MASKED, any(bvec2(key < first[t], key >= limit[t])));
                }
                CM_AT(s_tile, at) = v;
                tile_max = max(tile_max, v);
            }
            [[unroll]] for (uint sh = 1u; sh < SLANES; sh *= 2u) tile_max = max(tile_max, subgroupShuffleXor(tile_max, sh));
            const float m_new = max(m[t], tile_max);
            alpha[t] = mix(exp2(m[t] - m_new), 0.0, m[t] == MASKED);
            moved = moved || alpha[t] != 1.0;
            m[t] = m_new;
            l[t] *= alpha[t];
            SOFTMAX_LOOP for (uint c = 0u; c < SKEYS; c += 2u) {
                const uint key_local = KEY_LOCAL(c);  // and key_local + 1
                float p[2];
                [[unroll]] for (uint j = 0u; j < 2u; ++j) {
                    const float x = CM_AT(s_tile, s_base + local_row[t] * PITCH_S + key_local + j);
                    p[j] = mix(exp2(x - m_new), 0.0, x == MASKED);
                    l[t] += p[j];
                    if (dropout) p[j] = mix(0.0, p[j] * keep_scale, dropout_keeps(b, h, i, kb + key_local + j));
                }
                CM_PUT2(p_tile, p_base + local_row[t] * PITCH_P + key_local, p[0], p[1]);
            }
        }
        // Rescale O where a row's maximum moved (α ≠ 1): the factors as a 16 × 16 tile, row i's in
        // every column, multiplied into each accumulator element by element. Uniform per subgroup,
        // not per workgroup, so its subgroup syncs stand outside the branches: llvmpipe (Mesa 26.1)
        // holds a subgroup-scope control barrier as the workgroup's, and one that only some
        // subgroups reach never returns there (docs/LAVAPIPE.md, "The matrix units on a CPU").
        const bool rescale = subgroupMax(moved ? 1u : 0u) != 0u;
        CM_SUBGROUP_SYNC();  // every lane has read its scores: the tile is free
        if (rescale) {
            [[unroll]] for (uint t = 0u; t < SROWS; ++t)
                [[unroll]] for (uint c = 0u; c < SCOLS; ++c)
                    CM_AT(s_tile, s_base + local_row[t] * PITCH_S + part * SCOLS + c) = alpha[t];
        }
        CM_SUBGROUP_SYNC();
        if (rescale) {
            CmAcc factors;
            CM_LOAD_ACC(factors, s_tile, s_base, PITCH_S);
            CmAcc factors_bottom;  // the second row tile's
            if (RT > 1u) {
                CM_LOAD_ACC(factors_bottom, s_tile, s_base + 16u * PITCH_S, PITCH_S);
            }
            O_TILES(O_RESCALE)
        }

        // O += P·V for this pass's columns.
        STAGE_VALUES(kb)
        [[dont_unroll]] for (uint kt = 0u; kt < KT; ++kt) {
            CmA p_op;
            CM_LOAD_A(p_op, p_tile, p_base + 16u * kt, PITCH_P);
            CmA p_bottom;  // the second row tile's
            if (RT > 1u) {
                CM_LOAD_A(p_bottom, p_tile, p_base + 16u * PITCH_P + 16u * kt, PITCH_P);
            }
            CmB v_op;  // a column tile's, for its RT products
            O_TILES(O_PV)
        }
    }

    // Finish: the row's sum over its SLANES lanes; the sink (not in split mode: combine.comp adds
    // it); lse; then O, normalised, through the subgroup's tile 16 columns at a time.
    const bool layout_ok = gl_SubgroupSize == SG && gl_NumSubgroups == NSG;
    float row_factor[SROWS];
    bool row_loud[SROWS], row_stored[SROWS];
    uint o_row[SROWS];
    [[unroll]] for (uint t = 0u; t < SROWS; ++t) {
        float l_row = l[t];
        [[unroll]] for (uint sh = 1u; sh < SLANES; sh *= 2u) l_row += subgroupShuffleXor(l_row, sh);
        const uint rho = block_rho + sg * SGR + local_row[t];
        row_stored[t] = rho < rows_end && rho % Nq < len_q;
        const uint rho_c = min(rho, rows_end - 1u);
        const uint h = hk * group + rho_c / Nq, i = rho_c % Nq;
        const uint row = SPLIT ? i : q0 + i;
        float o_scale = 1.0, sink;
        float m_row = m[t];
        if (!SPLIT && sink_logit(h, sink)) {
            sink *= LOG2E;
            const float m_all = max(m_row, sink);
            o_scale = m_row == MASKED ? 0.0 : exp2(m_row - m_all);
            l_row = l_row * o_scale + exp2(sink - m_all);
            m_row = m_all;
        }
        o_row[t] = tensor_index(P.o, b, h, row) + split_index * P.o_split_stride;
        const bool poisoned = is_nan(l_row);
        row_loud[t] = !layout_ok || poisoned;
        row_factor[t] = l_row > 0.0 ? o_scale / l_row : 0.0;
        if (row_stored[t] && part == 0u && col_base == 0u)
            lse[tensor_index(P.lse, b, h, row) + split_index * P.lse_split_stride] =
                poisoned ? quiet_nan() : m_row == MASKED ? (SPLIT ? MASKED : negative_infinity()) : (m_row + log2(l_row)) * LN2;
    }
    O_TILES(O_OUT)
}

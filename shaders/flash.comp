#version 450
// Fused attention (flash attention): one pass over K/V per query row block, online softmax in
// registers, O(N·D) memory. Also the first kernel of split-KV decoding (SPLIT: each workgroup takes
// one slice of the keys and writes a partial O and log-sum-exp that combine.comp merges exactly).
//
// Work layout (the design measured in docs/LAVAPIPE.md, generalised to any subgroup size):
//   workgroup = NSG subgroups of SG lanes. By default no shared memory and no barriers: subgroups
//   run apart, each streaming its own K/V (what wins on CPU devices). With STAGE (the GPU variant)
//   the workgroup stages each key block once in shared memory for all its subgroups: K in chunks of
//   KD4 vec4s per key, V for this pass's columns, between barriers; the subgroups then share one key
//   range (the union of their rows' ranges) so that every barrier is reached by every invocation.
//   unit = (batch b, key/value head hk); its rows are ρ = g·Nq + i for the `group` query heads
//   h = hk·group + g that share the head, so K/V are read once per group (GQA, and decode with
//   Nq = 1 still fills a subgroup's rows).
//   each subgroup owns R rows; keys come in blocks of KB = SG·KL, lane λ owning KL of them
//   (block_key(λ, c): λ·KL + c streaming, c·SG + λ staged, so that lanes read consecutive shared
//   words), so a lane holds an R×KL score block in registers.
//   S block: per 4 dims, R texel fetches of Q (same address in every lane) and KL of K feed
//   R·KL·4 FMAs. Online softmax per row:  m = max(m_old, rowmax);  α = 2^(m_old − m);
//   l = l·α + Σ 2^(s − m);  o = o·α + Σ p·v  — with log2(e) folded into the scale, l kept as a
//   per-lane partial and reduced once at the end.
//   P·V: lane λ owns output columns 4·(λ + SG·t)..+3 (ggml-block V with DV4 = 4: 4·(λ·DV4 + t),
//   V_BLOCKS below); each key's probability is shuffled from the lane that owns it.
//   Streamed, ggml-block K is read a block at a time (and V, with V_BLOCKS, half a block): each
//   block's scale and data words are fetched once and decoded from registers
//   (common/typed_load.glsl's _block loaders). Staged, blocks load into the tiles per vec4.
// Masks: blocks outside every row's key range [first, limit) (key length, causal diagonal, sliding
// window) are never visited, so causal costs about half and a window costs N·window, not N²; blocks
// wholly inside every range skip per-score tests unless a bool mask or additive terms (float mask,
// ALiBi) are bound. Softcap, sinks and dropout follow mask.glsl's definitions: the sink joins the
// denominator when O is normalised (in split mode combine.comp adds it instead); dropped weights
// still count in l but not in O.
// A row with no visible key keeps m = MASKED (a finite sentinel, common/float_bits.glsl): α and p
// are guarded, O = 0 and lse = −∞ (or the sink), never NaN. In split mode an empty split writes
// MASKED as its partial lse, which combine.comp knows.
// PAGED variants read K and V from a paged cache (params.glsl's PagedKv): every key's row comes
// through the block table, the arithmetic is the dense kernel's, so the two agree bit for bit.
// Streaming, a lane looks up the rows of its own keys and the P·V loop shuffles V's rows from their
// owner, as it does the probabilities. Loads of masked keys are clamped to the last visible key.
// Varlen (P.varlen, common/varlen.glsl): packed Q/O/LSE rows of sequence b start at cu_q[b] (batch
// stride 0), rows i >= its length are neither loaded past the sequence nor stored; packed K/V rows
// start at cu_k[b], the sequence's key length is its own, and masked keys' loads are clamped to the
// last visible key as in PAGED.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/flash_params.glsl"
#include "common/shared_atomics.glsl"

layout(local_size_x_id = 0) in;                 // NSG · SG
layout(constant_id = 1) const uint SG = 8;      // lanes per subgroup (the pipeline requires it)
layout(constant_id = 2) const uint R = 8;       // query rows per subgroup
layout(constant_id = 3) const uint KL = 8;      // keys per lane per block
layout(constant_id = 4) const uint DV4 = 2;     // output vec4 slots per lane: ceil(Dv / 4 / SG)
layout(constant_id = 5) const bool SPLIT = false;
layout(constant_id = 6) const uint NSG = 8;     // subgroups per workgroup
layout(constant_id = 7) const bool STAGE = false;  // K/V blocks staged in shared memory
layout(constant_id = 8) const uint KD4 = 8;     // STAGE: vec4s of each key's K per staged chunk
layout(constant_id = 9) const uint VW4 = 16;    // STAGE: vec4 columns of V staged per key, ≤ SG·DV4
const uint KB = SG * KL;
const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;

#ifdef PAGED
layout(constant_id = 10) const uint POOLS = 1;  // K (and V) pools bound: 1 to 4
#endif

// K and V are read as (pool, element index): the pool is 0 unless PAGED binds several. K's pools 1-3
// are bindings 10-12, V's 13-15. TEXEL variants read f32/f16 Q, K, V through float texel views (the
// view's format converts); the others read 32-bit words and decode any storage type, each operand's
// own (Q_TYPE, K_TYPE, V_TYPE: common/typed_load.glsl), so bf16, ggml's blocks and fp8 (times its
// head's scale) dequantize in registers as they load. WORD_TEXELS variants fetch those words
// through R32_UINT texel views (cheaper than storage-buffer loads on CPU devices), and their rows
// start on 4 elements (the tuning's rule for every texel view), which the loaders use. The loaders
// are common/operand_loader.glsl's, as the backward kernels'.
layout(constant_id = 11) const uint Q_TYPE = 0;
layout(constant_id = 12) const uint K_TYPE = 0;
layout(constant_id = 13) const uint V_TYPE = 0;
// The operands through the typed loaders, paged K/V through up to four pools (load_k4 / load_v4, and
// ggml's blocks a block at a time: load_k_block / load_v_half_block), an fp8 K's and V's scales
// for this workgroup's head (k_scale, v_scale: the head terms' [2·Hq + hk] and [2·Hq + Hkv + hk],
// set once in main), O's store, the masks, varlen and paged rows, as the GPU prefill kernels have
// them.
#include "common/tile_operands.glsl"
// Streamed ggml-block V with 4 output slots per lane (16 columns, half a block): the lane's slots
// are consecutive columns, so that each key's V is one half-block load per lane (6 words for q8_0,
// the whole block's 5-6 for the 4- and 5-bit types) instead of 4 vec4 loads of 2-3 words each.
// Elsewhere slot t of lane λ is column group λ + SG·t, so that a subgroup's loads are consecutive
// (what GPUs coalesce).
#ifdef TEXEL
const bool V_BLOCKS = false;
#else
const bool V_BLOCKS = V_TYPE >= TYPE_Q8_0 && V_TYPE <= TYPE_IQ4_NL && !STAGE && DV4 == 4u;  // is_block_type(V_TYPE)
#endif

// STAGE's tiles (one element where STAGE is off, so the streaming variant reserves nothing):
// K as [KD4][KB + 1] (the padding spreads a chunk's stores over the banks), V as [KB][VW4]: the
// pass's columns, no more than Dv holds.
const uint K_TILE_ROW = KB + 1u;
shared vec4 k_tile[STAGE ? KD4 * K_TILE_ROW : 1u];
shared vec4 v_tile[STAGE ? KB * VW4 : 1u];
shared uint wg_first, wg_end;  // STAGE: the workgroup's key range

// The first of the 4 output columns in slot t of lane `lane`: interleaved across the subgroup,
// or the lane's own run of DV4 vec4s with V_BLOCKS.
uint lane_column(uint lane, uint t) { return P.first_column + 4u * (V_BLOCKS ? lane * DV4 + t : lane + SG * t); }

// The block-relative key that lane `owner` holds in its slot c.
uint block_key(uint owner, uint c) { return STAGE ? c * SG + owner : owner * KL + c; }

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    const uint Hkv = P.shape.Hkv, group = P.shape.group;
    const uint Nq = P.shape.Nq, Nkv = P.shape.Nkv, Dk = P.shape.Dk, Dv = P.shape.Dv;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.y;
    const uint b = unit / Hkv, hk = unit % Hkv;
#ifndef TEXEL
    if (is_fp8(K_TYPE)) k_scale = head_terms[2u * P.shape.Hq + hk];
    if (is_fp8(V_TYPE)) v_scale = head_terms[2u * P.shape.Hq + Hkv + hk];
#endif
    const uint rows_end = P.chunk.first_row + P.chunk.rows;
    // Row blocks in reverse: under a causal mask the last rows see the most keys, and starting the
    // heaviest workgroups first evens out the tail when workgroups outnumber the cores.
    const uint row_block = gl_NumWorkGroups.x - 1u - gl_WorkGroupID.x;
    const uint rho0 = P.chunk.first_row + (row_block * NSG + sg) * R;
    // Varlen: the sequence's queries start at packed row q0 and number len_q (Nq otherwise).
    const uint q0 = q_base(b), len_q = q_length(b);
    // A subgroup past the chunk's rows (or the sequence's) has nothing to store. Streaming, it
    // leaves (uniform per subgroup; nothing waits on it); staged, it still helps load the tiles and
    // meets every barrier.
    bool has_rows = false;
    [[unroll]] for (uint r = 0u; r < R; ++r) has_rows = has_rows || (rho0 + r < rows_end && (rho0 + r) % Nq < len_q);
    if (!STAGE && !has_rows) return;

    // This workgroup's keys: all of them, or one split's slice. Splits may be bound a few at a time
    // (keys beyond one binding): P.first_split is this dispatch's first split. Key reads are clamped to
    // the last key of this split, which its binding always holds.
    const uint split_index = SPLIT ? P.first_split + gl_WorkGroupID.z : 0u;
    uint k_begin = 0u, k_end = Nkv;
    if (SPLIT) {
        k_begin = split_index * P.keys_per_split;
        k_end = min(Nkv, k_begin + P.keys_per_split);
    }
    const uint k_last = max(k_end, 1u) - 1u;

    // Rows: ρ -> (h, i); rows past the chunk repeat its last row, rows past a packed sequence its
    // last query; neither is stored. (A subgroup without rows loads no Q.)
    uint q_row[R];
    const uint q_last = P.varlen.packed_q != 0u ? max(P.varlen.total_q, 1u) - 1u : 0xffffffffu;  // an empty last sequence
    uint first[R], limit[R];  // row r sees keys [first[r], limit[r]): key length, causal, window, split
    uint lo_first = 0xffffffffu, hi_first = 0u, lo_limit = 0xffffffffu, hi_limit = 0u;
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint rho = min(rho0 + r, rows_end - 1u);
        const uint h = hk * group + rho / Nq, i = min(rho % Nq, max(len_q, 1u) - 1u);
        q_row[r] = tensor_index(P.q, b, h, min(q0 + i, q_last));
        const RowMask mask = row_mask(b, h, i);
        first[r] = max(mask.first, k_begin);
        limit[r] = min(mask.limit, k_end);
        lo_first = min(lo_first, first[r]);
        hi_first = max(hi_first, first[r]);
        lo_limit = min(lo_limit, limit[r]);
        hi_limit = max(hi_limit, limit[r]);
    }
    // Blocks outside every row's range are never visited. Staged, the workgroup loads the union of
    // its subgroups' ranges, and each subgroup computes only the blocks of its own range (own_*), so
    // that, as streamed, no row reads V in a block outside every range of its subgroup.
    k_begin = max(k_begin, lo_first);
    k_end = min(k_end, hi_limit);
    const uint own_begin = k_begin, own_end = has_rows ? k_end : 0u;
    if (STAGE) {
        if (gl_LocalInvocationIndex == 0u) {
            wg_first = 0xffffffffu;
            wg_end = 0u;
        }
        barrier();
        if (has_rows && lane == 0u && k_begin < k_end) {
            SHARED_ATOMIC_MIN(wg_first, k_begin);
            SHARED_ATOMIC_MAX(wg_end, k_end);
        }
        barrier();
        k_begin = wg_first;
        k_end = wg_end;
    }
    const bool elementwise = has_flag(MASK_BOOL) || has_flag(MASK_FLOAT) || has_flag(MASK_ALIBI);
    const bool capped = P.mask.softcap > 0.0;
    const bool dropout = P.mask.drop_threshold != 0u;
    const float scale = P.scale, scale2 = P.scale * LOG2E, keep_scale = P.mask.keep_scale;
    // The last key a load may address (a block's masked keys still load a row): the split's last
    // for dense K/V; paged, the last visible one, as the table need name no block past a length.
#ifdef PAGED
    const uint key_last = max(k_end, 1u) - 1u;
#else
    const uint key_last = P.varlen.packed_k != 0u ? max(k_end, 1u) - 1u : k_last;  // packed: the next sequence's
#endif
    const uint k0 = k_base(b);  // varlen: the sequence's first packed key row
    const uint k_head = tensor_index(P.k, b, hk, k0), k_stride = P.k.stride.z;
    const uint v_head = tensor_index(P.v, b, hk, k0), v_stride = P.v.stride.z;
    const uint Dk4 = (Dk + 3u) / 4u;
    // Staged reads index the tiles by lane: keep them inside the tiles even on a device that ran us
    // at another subgroup size (whose result is written as NaN below).
    const uint tile_lane = min(lane, SG - 1u);

    // Output columns of this lane (lane_column; wide heads take several passes, so the accumulators
    // stay in registers); past Dv they load column 0 and store nothing.
    const uint col_base = P.first_column;
    uint v_col[DV4];
    [[unroll]] for (uint t = 0u; t < DV4; ++t) {
        const uint col = lane_column(lane, t);
        v_col[t] = col < Dv ? col : 0u;
    }

    float m[R], l[R];
    vec4 o[R][DV4];
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        m[r] = MASKED;
        l[r] = 0.0;
        [[unroll]] for (uint t = 0u; t < DV4; ++t) o[r][t] = vec4(0.0);
    }

    // Blocks of KB keys; the outer loop keeps every trip count far below lavapipe's 65,535.
    for (uint kb0 = k_begin; kb0 < k_end; kb0 += 4096u * KB)
    for (uint kb = kb0; kb < min(k_end, kb0 + 4096u * KB); kb += KB) {
        float s[R][KL];
#ifdef PAGED
        uvec2 slots[KL];  // streamed: this lane's keys' slots, shuffled to every lane in P·V
#endif
        [[unroll]] for (uint r = 0u; r < R; ++r)
            [[unroll]] for (uint c = 0u; c < KL; ++c) s[r][c] = 0.0;
        if (STAGE) {
            // K in chunks of KD4 vec4s per key; the first chunk's stage also loads V for the P·V
            // below. Loads are coalesced along each key's row; reads are consecutive across lanes.
            for (uint d0 = 0u; d0 < Dk4; d0 += KD4) {
                barrier();  // every subgroup is done with the tiles of the previous chunk or block
                for (uint e = gl_LocalInvocationIndex; e < KB * KD4; e += NSG * SG) {
                    const uint key = e / KD4, d4 = d0 + e % KD4;
                    const uvec2 row = K_ROW(min(kb + key, key_last));
                    k_tile[(e % KD4) * K_TILE_ROW + key] =
                        d4 < Dk4 ? load_k4(row.x, row.y + 4u * d4, Dk - 4u * d4) : vec4(0.0);
                }
                if (d0 == 0u)
                    for (uint e = gl_LocalInvocationIndex; e < KB * VW4; e += NSG * SG) {
                        const uint key = e / VW4, col = col_base + 4u * (e % VW4);
                        const uvec2 row = V_ROW(min(kb + key, key_last));
                        v_tile[e] = col < Dv ? load_v4(row.x, row.y + col, Dv - col) : vec4(0.0);
                    }
                barrier();
                if (kb < own_end && kb + KB > own_begin)  // uniform per subgroup
                for (uint j = 0u; j < min(KD4, Dk4 - d0); ++j) {
                    const uint d4 = d0 + j;
                    vec4 kv[KL];
                    [[unroll]] for (uint c = 0u; c < KL; ++c) kv[c] = k_tile[j * K_TILE_ROW + block_key(tile_lane, c)];
                    [[unroll]] for (uint r = 0u; r < R; ++r) {
                        const vec4 qv = load_q4(q_row[r] + 4u * d4, Dk - 4u * d4);
                        [[unroll]] for (uint c = 0u; c < KL; ++c) s[r][c] += dot(qv, kv[c]);
                    }
                }
            }
        } else {
            uvec2 k_row[KL];
#ifdef PAGED
            // One table lookup per key serves K here and V in the P·V loop below.
            [[unroll]] for (uint c = 0u; c < KL; ++c) {
                slots[c] = paged_slot(b, min(kb + block_key(lane, c), key_last));
                k_row[c] = paged_index(P.k, hk, slots[c]);
            }
#else
            [[unroll]] for (uint c = 0u; c < KL; ++c) k_row[c] = K_ROW(min(kb + block_key(lane, c), key_last));
#endif
#ifndef TEXEL
            if (is_block_type(K_TYPE)) {
                // ggml's blocks a block at a time (Dk is a multiple of 32): each key's block is
                // fetched once and its 8 vec4s decode from registers; the sums run in the vec4
                // loop's order, so the result is the same bit for bit.
                for (uint d32 = 0u; d32 < Dk / 32u; ++d32) {
                    TlBlock kblk[KL];
                    [[unroll]] for (uint c = 0u; c < KL; ++c) kblk[c] = load_k_block(k_row[c].x, k_row[c].y + 32u * d32);
                    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                        const uint d4 = 8u * d32 + j;
                        vec4 kv[KL];
                        [[unroll]] for (uint c = 0u; c < KL; ++c) kv[c] = load_k4_0_block4(kblk[c], j);
                        [[unroll]] for (uint r = 0u; r < R; ++r) {
                            const vec4 qv = load_q4(q_row[r] + 4u * d4, 4u);
                            [[unroll]] for (uint c = 0u; c < KL; ++c) s[r][c] += dot(qv, kv[c]);
                        }
                    }
                }
            } else
#endif
            for (uint d4 = 0u; d4 < Dk4; ++d4) {
                const uint valid = Dk - 4u * d4;
                vec4 kv[KL];
                [[unroll]] for (uint c = 0u; c < KL; ++c) kv[c] = load_k4(k_row[c].x, k_row[c].y + 4u * d4, valid);
                [[unroll]] for (uint r = 0u; r < R; ++r) {
                    const vec4 qv = load_q4(q_row[r] + 4u * d4, valid);
                    [[unroll]] for (uint c = 0u; c < KL; ++c) s[r][c] += dot(qv, kv[c]);
                }
            }
        }

        // A staged subgroup outside its own range has loaded its share of the tiles and met the
        // barriers (all of them are above); it skips the rest of this block.
        if (STAGE && (kb >= own_end || kb + KB <= own_begin)) continue;

        // Scale into log2 units and mask. Inside every row's limit with no bool/float mask, no
        // per-score test is needed (the common case); on the limits' edge (the causal diagonal, the
        // last keys) one compare per score; with a bool or float mask the full mask model.
        const bool whole = !elementwise && kb >= hi_first && kb + KB <= lo_limit;
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            RowMask mask;
            if (elementwise) {
                const uint rho = min(rho0 + r, rows_end - 1u);
                mask = row_mask(b, hk * group + rho / Nq, min(rho % Nq, max(len_q, 1u) - 1u));
                mask.limit = limit[r];
            }
            [[unroll]] for (uint c = 0u; c < KL; ++c) {
                float x = capped ? softcap(s[r][c] * scale) * LOG2E : s[r][c] * scale2;
                const uint key = kb + block_key(lane, c);
                if (elementwise) {
                    float terms;
                    x = key_terms(mask, key, terms) ? x + terms * LOG2E : MASKED;
                } else if (!whole && (key < first[r] || key >= limit[r])) {
                    x = MASKED;
                }
                s[r][c] = x;
            }
        }

        // Online softmax: one subgroupMax per row per block; the sum stays a per-lane partial.
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            float block_max = s[r][0];
            [[unroll]] for (uint c = 1u; c < KL; ++c) block_max = max(block_max, s[r][c]);
            const float m_new = max(m[r], subgroupMax(block_max));
            // Guards: nothing seen yet (m = MASKED) rescales nothing; a still-empty row stays MASKED.
            const float alpha = m[r] == MASKED ? 0.0 : exp2(m[r] - m_new);
            m[r] = m_new;
            l[r] *= alpha;
            [[unroll]] for (uint t = 0u; t < DV4; ++t) o[r][t] *= alpha;
            [[unroll]] for (uint c = 0u; c < KL; ++c) {
                const float p = s[r][c] == MASKED ? 0.0 : exp2(s[r][c] - m_new);
                s[r][c] = p;
                l[r] += p;
            }
            // Dropout: the weight that multiplies V is dropped or rescaled; l keeps the softmax's.
            if (dropout) {
                const uint rho = min(rho0 + r, rows_end - 1u);
                const uint h = hk * group + rho / Nq, i = rho % Nq;
                [[unroll]] for (uint c = 0u; c < KL; ++c)
                    s[r][c] = dropout_keeps(b, h, i, kb + block_key(lane, c)) ? s[r][c] * keep_scale : 0.0;
            }
        }

        // P·V: every key of the block, its probabilities shuffled from the lane that owns it, V
        // from the tile (staged) or from memory. The owner loop stays rolled: unrolling it too
        // multiplies the code by SG, and compiling the scalar-load variants then took minutes.
        [[dont_unroll]] for (uint owner = 0u; owner < SG; ++owner)
            [[unroll]] for (uint c = 0u; c < KL; ++c) {
                const uint key = block_key(owner, c);
#ifdef PAGED
                // The owner looked its keys' rows up (one table read per key, not one per lane).
                const uvec2 key_slot = STAGE          ? uvec2(0u)
                                       : POOLS == 1u ? uvec2(0u, subgroupShuffle(slots[c].y, owner))
                                                     : subgroupShuffle(slots[c], owner);
                const uvec2 v_row = paged_index(P.v, hk, key_slot);
#else
                const uvec2 v_row = V_ROW(min(kb + key, key_last));
#endif
                float p[R];
                [[unroll]] for (uint r = 0u; r < R; ++r) p[r] = subgroupShuffle(s[r][c], owner);
#ifndef TEXEL
                if (V_BLOCKS) {  // the lane's 16 columns: one half of a block
                    const TlBlock vblk = load_v_half_block(v_row.x, v_row.y + v_col[0]);
                    const uint half_start = 4u * ((v_col[0] >> 4) & 1u);  // its first vec4 in the block
                    [[unroll]] for (uint t = 0u; t < DV4; ++t) {
                        const vec4 v = load_v4_0_half4(vblk, half_start + t);
                        [[unroll]] for (uint r = 0u; r < R; ++r) o[r][t] += p[r] * v;
                    }
                } else
#endif
                [[unroll]] for (uint t = 0u; t < DV4; ++t) {
                    const uint slot = tile_lane + SG * t;  // past VW4: a column past Dv, never stored
                    const vec4 v = STAGE ? (slot < VW4 ? v_tile[key * VW4 + slot] : vec4(0.0))
                                         : load_v4(v_row.x, v_row.y + v_col[t], Dv - v_col[t]);
                    [[unroll]] for (uint r = 0u; r < R; ++r) o[r][t] += p[r] * v;
                }
            }
    }

    // Finish: reduce the partial sums; add the sink (not in split mode: combine.comp adds it once);
    // normalise; store O (or the split's partial) and lse.
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        float l_row = subgroupAdd(l[r]);
        if (rho0 + r >= rows_end || (rho0 + r) % Nq >= len_q) continue;
        const uint rho = rho0 + r;
        const uint h = hk * group + rho / Nq, i = rho % Nq;
        // Packed rows (varlen) from the sequence's first; split partials stay padded (chunk-local).
        const uint row = SPLIT ? i : q0 + i;
        float o_scale = 1.0, sink;
        if (!SPLIT && sink_logit(h, sink)) {
            sink *= LOG2E;
            const float m_all = max(m[r], sink);
            o_scale = m[r] == MASKED ? 0.0 : exp2(m[r] - m_all);
            l_row = l_row * o_scale + exp2(sink - m_all);
            m[r] = m_all;
        }
        const uint o_row = tensor_index(P.o, b, h, row) + split_index * P.o_split_stride;
        // A device that ran us at another subgroup size than SG (it could not be required) would
        // have computed garbage: make that loud (NaN) rather than quietly wrong.
        // NaN scores (NaN or inf in q or k) leave l NaN, while max() may have dropped the NaN from m:
        // the row is NaN, O and lse alike, as in the reference (and combine.comp sees it).
        const bool poisoned = is_nan(l_row);
        const bool loud = gl_SubgroupSize != SG || poisoned;  // NaN written, not computed
        const float inv = l_row > 0.0 ? o_scale / l_row : 0.0;
        [[unroll]] for (uint t = 0u; t < DV4; ++t) {
            const uint col = lane_column(lane, t);
            [[unroll]] for (uint c = 0u; c < 4u; ++c)
                if (col + c < Dv) store_out(o_row + col + c, loud ? quiet_nan() : o[r][t][c] * inv);
        }
        if (lane == 0u && col_base == 0u)
            lse[tensor_index(P.lse, b, h, row) + split_index * P.lse_split_stride] =
                poisoned ? quiet_nan() : m[r] == MASKED ? (SPLIT ? MASKED : negative_infinity()) : (m[r] + log2(l_row)) * LN2;
    }
}

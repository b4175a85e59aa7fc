// flash_coopmat.comp's K/V staging, included at global scope after its tiles: a tile of BC keys
// in chunks of 8 elements (a row's d or columns 8c..8c+7), stored with CM_PUT8 to kv_tile (K, then
// V where K was) or, with KV_APART, K to kv_tile and V to v_tile together. With AHEAD a tile's chunks
// are loaded into registers before they are stored: a phase ahead where K and V take turns (STEPS
// per invocation: K's loads in flight during the previous tile's P·V, V's during S and the
// softmax), a whole tile ahead where they are apart (K's STEPS and V's V_HELD, in flight during the
// previous tile's S, softmax and P·V); otherwise each is loaded and stored in turn. The macros
// expand inside main and name its locals: inv, k_end, key_last, col_base, Dk, Dv, and what K_ROW and
// V_ROW read (common/paged_rows.glsl).
#ifndef VKATTN_COOPMAT_KV_STAGING_GLSL
#define VKATTN_COOPMAT_KV_STAGING_GLSL

const uint K_CHUNKS = BC * DKP / 8u, V_CHUNKS = BC * OC / 8u;
const uint K_STEPS = (K_CHUNKS + WG - 1u) / WG, V_STEPS = (V_CHUNKS + WG - 1u) / WG;
const uint STEPS = KV_APART || K_STEPS > V_STEPS ? K_STEPS : V_STEPS;  // K's (and V's in turn)
const uint V_HELD = KV_APART ? V_STEPS : 1u;                           // V's, where apart
CM_ELEM4 stage_lo[STEPS];
CM_ELEM4 stage_hi[STEPS];
CM_ELEM4 v_lo[V_HELD];
CM_ELEM4 v_hi[V_HELD];

// Chunk e_ of the K (or V) tile at key kb_ into lo_, hi_: a 16-byte word where WIDE, else 4
// elements at a time through the typed loaders (any type, any alignment, paged pools: the pool
// K_ROW or V_ROW gives); zeros past Dk (Dv). A row's chunks run over `run` elements from `first`.
#define LOAD_CHUNK(ROW, words4, pooled_load4, run, first, D, e_, kb_, lo_, hi_)                 \
    {                                                                                       \
        const uint key = (e_) / ((run) / 8u), d = (first) + 8u * ((e_) % ((run) / 8u));     \
        const uvec2 at = ROW(min((kb_) + key, key_last));                                   \
        if (WIDE) CM_UNPACK8(d < (D) ? words4[(at.y + d) / 8u] : uvec4(0u), lo_, hi_)       \
        else CM_FETCH8(pooled_load4, at.y + d, d, D, lo_, hi_);                             \
    }
#define K_POOL_LOAD4(index, valid) load_k4(at.x, index, valid)
#define V_POOL_LOAD4(index, valid) load_v4(at.x, index, valid)
#define LOAD_K(e_, kb_, lo_, hi_) LOAD_CHUNK(K_ROW, k_words4, K_POOL_LOAD4, DKP, 0u, Dk, e_, kb_, lo_, hi_)
#define LOAD_V(e_, kb_, lo_, hi_) LOAD_CHUNK(V_ROW, v_words4, V_POOL_LOAD4, OC, col_base, Dv, e_, kb_, lo_, hi_)
// AHEAD: a tile's chunks into the staging registers LO, HI (N of each) early; else loaded and
// stored chunk by chunk (STAGE: the tile's chunks into TILE, rows PITCH apart).
#define FETCH(LOAD, chunks, kb_, LO, HI, N) \
    CM_LOOP for (uint st = 0u; st < (N); ++st) LOAD(min(inv + st * WG, (chunks) - 1u), kb_, LO[st], HI[st])
#define STAGE(LOAD, chunks, kb_, run, TILE, PITCH, LO, HI, N)                                                       \
    if (AHEAD) {                                                                                                   \
        CM_LOOP for (uint st = 0u; st < (N); ++st) {                                                               \
            const uint e = inv + st * WG;                                                                          \
            if (e < (chunks)) CM_PUT8(TILE, (e / ((run) / 8u)) * (PITCH) + 8u * (e % ((run) / 8u)), LO[st], HI[st]); \
        }                                                                                                          \
    } else {                                                                                                       \
        for (uint e = inv; e < (chunks); e += WG) {                                                                \
            CM_ELEM4 lo, hi;                                                                                       \
            LOAD(e, kb_, lo, hi);                                                                                  \
            CM_PUT8(TILE, (e / ((run) / 8u)) * (PITCH) + 8u * (e % ((run) / 8u)), lo, hi);                         \
        }                                                                                                          \
    }
// A key tile's phases. The first tile's loads, before the loop.
#define STAGE_BEGIN(kb_)                                                        \
    if (AHEAD && (kb_) < k_end) {                                               \
        FETCH(LOAD_K, K_CHUNKS, kb_, stage_lo, stage_hi, STEPS);                \
        if (KV_APART) FETCH(LOAD_V, V_CHUNKS, kb_, v_lo, v_hi, V_HELD);         \
    }
// At the tile's start: K (and V, where apart) stored between two barriers (every subgroup is done
// with the previous tile's K and V); then the loads that fly during S and the softmax: V's of this
// tile in turn, or the next tile's K and V.
#define STAGE_KEYS(kb_)                                                                    \
    barrier();                                                                             \
    STAGE(LOAD_K, K_CHUNKS, kb_, DKP, kv_tile, PITCH_KV, stage_lo, stage_hi, STEPS)        \
    if (KV_APART) {                                                                        \
        STAGE(LOAD_V, V_CHUNKS, kb_, OC, v_tile, PITCH_V, v_lo, v_hi, V_HELD)              \
    }                                                                                      \
    barrier();                                                                             \
    if (AHEAD && KV_APART && (kb_) + BC < k_end) {                                         \
        FETCH(LOAD_K, K_CHUNKS, (kb_) + BC, stage_lo, stage_hi, STEPS);                    \
        FETCH(LOAD_V, V_CHUNKS, (kb_) + BC, v_lo, v_hi, V_HELD);                           \
    } else if (AHEAD && !KV_APART) {                                                       \
        FETCH(LOAD_V, V_CHUNKS, kb_, stage_lo, stage_hi, STEPS);                           \
    }
// Before P·V: V stored where K was between two barriers (every subgroup is done with K; P is
// written), then the next tile's K loads fly during P·V; where apart, only the subgroup's own P
// made visible to its lanes.
#define STAGE_VALUES(kb_)                                                                  \
    if (KV_APART) {                                                                        \
        CM_SUBGROUP_SYNC();                                                                \
    } else {                                                                               \
        barrier();                                                                         \
        STAGE(LOAD_V, V_CHUNKS, kb_, OC, kv_tile, PITCH_KV, stage_lo, stage_hi, STEPS)     \
        barrier();                                                                         \
        if (AHEAD && (kb_) + BC < k_end) FETCH(LOAD_K, K_CHUNKS, (kb_) + BC, stage_lo, stage_hi, STEPS); \
    }

#endif  // VKATTN_COOPMAT_KV_STAGING_GLSL

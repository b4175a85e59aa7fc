// flash_coopmat.comp's K/V staging, included at global scope after its tiles: a tile of BC keys
// in chunks of 8 elements (a row's d or columns 8c..8c+7), stored to kv_tile with CM_PUT8. With
// AHEAD a tile's chunks are loaded into registers a phase before they are stored (STEPS per
// invocation: K's loads in flight during the previous tile's P·V, V's during S and the softmax);
// otherwise each is loaded and stored in turn. The macros expand inside main and name its locals:
// inv, key_last, col_base, Dk, Dv, and what K_ROW and V_ROW read (common/paged_rows.glsl).
#ifndef VKATTN_COOPMAT_KV_STAGING_GLSL
#define VKATTN_COOPMAT_KV_STAGING_GLSL

const uint K_CHUNKS = BC * DKP / 8u, V_CHUNKS = BC * OC / 8u;
const uint STEPS = ((K_CHUNKS > V_CHUNKS ? K_CHUNKS : V_CHUNKS) + WG - 1u) / WG;
CM_ELEM4 stage_lo[STEPS];
CM_ELEM4 stage_hi[STEPS];
// 8 f16 values of a 16-byte word as two operand vectors.
void wide_values(uvec4 w, out CM_ELEM4 lo, out CM_ELEM4 hi) {
#ifdef CM_KHR
    lo = f16vec4(unpackFloat2x16(w.x), unpackFloat2x16(w.y));
    hi = f16vec4(unpackFloat2x16(w.z), unpackFloat2x16(w.w));
#else
    lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
    hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
#endif
}

// Chunk e_ of the K (or V) tile at key kb_ into lo_, hi_: a 16-byte word where WIDE, else 4
// elements at a time through the typed loaders (any type, any alignment, paged pools: the pool
// K_ROW or V_ROW gives); zeros past Dk (Dv). A row's chunks run over `run` elements from `first`.
#define LOAD_CHUNK(ROW, words4, pooled_load4, run, first, D, e_, kb_, lo_, hi_)                 \
    {                                                                                       \
        const uint key = (e_) / ((run) / 8u), d = (first) + 8u * ((e_) % ((run) / 8u));     \
        const uvec2 at = ROW(min((kb_) + key, key_last));                                   \
        if (WIDE) wide_values(d < (D) ? words4[(at.y + d) / 8u] : uvec4(0u), lo_, hi_);     \
        else CM_FETCH8(pooled_load4, at.y + d, d, D, lo_, hi_);                             \
    }
#define K_POOL_LOAD4(index, valid) load_k4(at.x, index, valid)
#define V_POOL_LOAD4(index, valid) load_v4(at.x, index, valid)
#define LOAD_K(e_, kb_, lo_, hi_) LOAD_CHUNK(K_ROW, k_words4, K_POOL_LOAD4, DKP, 0u, Dk, e_, kb_, lo_, hi_)
#define LOAD_V(e_, kb_, lo_, hi_) LOAD_CHUNK(V_ROW, v_words4, V_POOL_LOAD4, OC, col_base, Dv, e_, kb_, lo_, hi_)
// AHEAD: a tile's chunks into the staging registers a phase early; else loaded and stored chunk by
// chunk (STAGE: the tile's chunks into kv_tile).
#define FETCH(LOAD, chunks, kb_) \
    CM_LOOP for (uint st = 0u; st < STEPS; ++st) LOAD(min(inv + st * WG, (chunks) - 1u), kb_, stage_lo[st], stage_hi[st])
#define STAGE(LOAD, chunks, kb_, run)                                                                                 \
    if (AHEAD) {                                                                                                   \
        CM_LOOP for (uint st = 0u; st < STEPS; ++st) {                                                             \
            const uint e = inv + st * WG;                                                                          \
            if (e < (chunks)) CM_PUT8(kv_tile, (e / ((run) / 8u)) * PITCH_KV + 8u * (e % ((run) / 8u)), stage_lo[st], stage_hi[st]); \
        }                                                                                                          \
    } else {                                                                                                       \
        for (uint e = inv; e < (chunks); e += WG) {                                                                \
            CM_ELEM4 lo, hi;                                                                                       \
            LOAD(e, kb_, lo, hi);                                                                                  \
            CM_PUT8(kv_tile, (e / ((run) / 8u)) * PITCH_KV + 8u * (e % ((run) / 8u)), lo, hi);                     \
        }                                                                                                          \
    }

#endif  // VKATTN_COOPMAT_KV_STAGING_GLSL

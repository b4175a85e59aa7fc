// Where a key's K and V rows lie, for the flash kernels (flash.comp, flash_decode.comp): K_ROW(key)
// and V_ROW(key) give (pool, element index) of the row's first element. PAGED variants read them
// through a paged cache's block table (params.glsl's PagedKv); the others from the dense rows of the
// includer's locals k_head, k_stride, v_head, v_stride. Needs P (FlashParams), and with PAGED the
// spec constant POOLS and the locals b and hk.
#ifndef VKATTN_PAGED_ROWS_GLSL
#define VKATTN_PAGED_ROWS_GLSL

#ifdef PAGED
layout(std430, set = 0, binding = 16) readonly buffer BlockTable { int block_table[]; };

// Where key `key` of sequence b lives: (pool, its offset in the pool in rows of D, head 0). A
// block id outside [0, blocks) is clamped: a table the host cannot check never reads out of
// bounds. Divisions are scalar on CPU devices: a power-of-two block size shifts, one pool divides
// nothing. K and V share the slot (their pools share one layout in rows).
uvec2 paged_slot(uint b, uint key) {
    const uint entry = P.paged.block_shift < 32u ? key >> P.paged.block_shift : key / P.paged.block_size;
    const uint block = min(uint(block_table[b * P.paged.table_stride + entry]), P.paged.blocks - 1u);
    const uint pool = POOLS == 1u ? 0u : block / P.paged.blocks_per_pool;
    return uvec2(pool, (block - pool * P.paged.blocks_per_pool) * P.paged.block_units +
                       (key - entry * P.paged.block_size) * P.paged.row_units);
}
// The (pool, element index) where head hk's row of a slot starts in K or V.
uvec2 paged_index(TensorDesc t, uint hk, uvec2 slot) {
    return uvec2(slot.x, slot.y * t.stride.w + hk * t.stride.y + t.origin.w);
}
uvec2 paged_row(TensorDesc t, uint b, uint hk, uint key) { return paged_index(t, hk, paged_slot(b, key)); }
#define K_ROW(key) paged_row(P.k, b, hk, key)
#define V_ROW(key) paged_row(P.v, b, hk, key)
#else
#define K_ROW(key) uvec2(0u, k_head + (key) * k_stride)
#define V_ROW(key) uvec2(0u, v_head + (key) * v_stride)
#endif

#endif

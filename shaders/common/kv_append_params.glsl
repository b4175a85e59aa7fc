// kv_append.comp's parameter block (both its modes). Mirrored by AppendParams in
// engine/attention/params.hpp.
#ifndef VKATTN_KV_APPEND_PARAMS_GLSL
#define VKATTN_KV_APPEND_PARAMS_GLSL

#include "params.glsl"

layout(std140, set = 0, binding = 0) uniform AppendParams {
    uint B;           // sequences
    uint Hkv;         // key/value heads
    uint capacity;    // rows per (sequence, head) in the cache (PAGED: table_stride · block_size)
    uint new_rows;    // rows per (sequence, head) in the new K/V (the whole append)
    uint Dk;
    uint Dv;
    uint has_counts;  // 1: sequence b appends counts[b] of its new rows (clamped to new_rows); 0: all;
                      // 2: the same, its rows packed from row counts[B + b] (varlen)
    uint first_new;   // the new row of grid x = 0: an append too long for one grid or binding is cut
    ChunkRange chunk; // units u = b·Hkv + h from first_unit (grid y); the cache rows
                      // [first_row, first_row + rows) this dispatch's bindings hold
    TensorDesc k_new, v_new, k_cache, v_cache;  // PAGED: k_cache and v_cache address the pools
    PagedKv paged;    // PAGED: the pools and the block table
    uint pool;        // PAGED: the pool this dispatch has bound; rows in other pools are skipped
} P;

#endif

#version 450
// A KV cache's append, in two dispatches with a barrier between them:
//   rows: row t of sequence b's new K and V (every head) lands in cache row len[b] + t, for
//         t < count[b]; rows that would pass the capacity are dropped (the host refuses such an
//         append first; the clamp keeps a length written elsewhere from writing out of bounds);
//   ADVANCE: len[b] = min(len[b] + count[b], capacity), once every row is written.
// Lengths are clamped to [0, capacity] on read, as mask.glsl clamps them to [0, Nkv].
// PAGED: the cache is a paged one (params.glsl's PagedKv): row n of sequence b goes to row
// n % block_size of block table[b][n / block_size], through the pool this dispatch binds (a pool
// over several bindings takes one dispatch per binding; rows of other pools are skipped there). A
// row whose table entry names no block is dropped (the host refuses such an append first).
// Packed new rows (varlen): sequence b's rows start where the uploaded offsets say.
// Workgroups: (t - first_new, unit) for rows, one invocation per sequence for ADVANCE; the lanes of a row's
// workgroup walk its features.
#extension GL_EXT_shader_16bit_storage : enable

#include "common/kv_append_params.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

#ifdef IN_F16
#define IN_TYPE float16_t
#else
#define IN_TYPE float
#endif
#ifdef OUT_F16
#define OUT_TYPE float16_t
#else
#define OUT_TYPE float
#endif

// A conversion only between different types (glslang would emit an invalid half-to-half FConvert).
#if defined(IN_F16) == defined(OUT_F16)
#define STORED(x) (x)
#else
#define STORED(x) OUT_TYPE(x)
#endif

#ifdef ADVANCE
layout(std430, set = 0, binding = 5) buffer Lengths { int lengths[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer KNew { IN_TYPE k_new[]; };
layout(std430, set = 0, binding = 2) readonly buffer VNew { IN_TYPE v_new[]; };
layout(std430, set = 0, binding = 3) writeonly buffer KCache { OUT_TYPE k_cache[]; };
layout(std430, set = 0, binding = 4) writeonly buffer VCache { OUT_TYPE v_cache[]; };
layout(std430, set = 0, binding = 5) readonly buffer Lengths { int lengths[]; };
#endif
layout(std430, set = 0, binding = 6) readonly buffer Counts { int counts[]; };
#if defined(PAGED) && !defined(ADVANCE)
layout(std430, set = 0, binding = 7) readonly buffer BlockTable { int block_table[]; };
#endif

uint length_of(uint b) { return uint(clamp(lengths[b], 0, int(P.capacity))); }
uint count_of(uint b) { return P.has_counts != 0u ? uint(clamp(counts[b], 0, int(P.new_rows))) : P.new_rows; }
// Packed new rows (has_counts = 2, varlen): sequence b's start at row counts[B + b] of k_new and
// v_new, whose batch stride is 0 (the host uploads offsets it checked).
uint first_new_row(uint b) { return P.has_counts == 2u ? uint(max(counts[P.B + b], 0)) : 0u; }

void main() {
#ifdef ADVANCE
    const uint b = gl_GlobalInvocationID.x;
    if (b < P.B) lengths[b] = int(min(length_of(b) + count_of(b), P.capacity));
#else
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.y;
    const uint b = unit / P.Hkv, h = unit % P.Hkv;
    const uint t = P.first_new + gl_WorkGroupID.x;
    if (t >= count_of(b)) return;
    const uint row = length_of(b) + t;
#ifdef PAGED
    if (row >= P.capacity) return;
    const uint entry = row / P.paged.block_size;
    const uint block = uint(block_table[b * P.paged.table_stride + entry]);
    if (block >= P.paged.blocks || block / P.paged.blocks_per_pool != P.pool) return;
    // flash.comp's paged_slot, written to: the row's offset in the pool in rows of D.
    const uint slot = (block - P.pool * P.paged.blocks_per_pool) * P.paged.block_units +
                      (row - entry * P.paged.block_size) * P.paged.row_units;
    const uint k_to = slot * P.k_cache.stride.w + h * P.k_cache.stride.y + P.k_cache.origin.w;
    const uint v_to = slot * P.v_cache.stride.w + h * P.v_cache.stride.y + P.v_cache.origin.w;
#else
    if (row >= P.capacity || row < P.chunk.first_row || row - P.chunk.first_row >= P.chunk.rows) return;
    const uint k_to = tensor_index(P.k_cache, b, h, row), v_to = tensor_index(P.v_cache, b, h, row);
#endif
    const uint from = first_new_row(b) + t;
    const uint k_from = tensor_index(P.k_new, b, h, from), v_from = tensor_index(P.v_new, b, h, from);
    for (uint d = gl_LocalInvocationID.x; d < P.Dk; d += WG) k_cache[k_to + d] = STORED(k_new[k_from + d]);
    for (uint d = gl_LocalInvocationID.x; d < P.Dv; d += WG) v_cache[v_to + d] = STORED(v_new[v_from + d]);
#endif
}

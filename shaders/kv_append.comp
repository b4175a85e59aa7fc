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
// Workgroups: (t - first_new, unit) for rows, one invocation per sequence for ADVANCE.
// Types: the new rows are any float type (IN_TYPE, read as words: common/typed_load.glsl); K's and
// V's caches each have their own type (K_OUT, V_OUT). The default variant stores f32 into f32 caches
// (32-bit stores); HALVES stores every type as 16-bit halves (which needs storageBuffer16BitAccess):
// f32 as two, f16 and bf16 as one, fp8 two elements (fp8(x / scale), the head's scale from binding
// 8) per half, and ggml's blocks whole: for a block type each lane quantizes whole blocks of 32 with
// ggml's reference rounding (common/quantize.glsl), so rows come out bit for bit the blocks
// vkattn::quantize_row writes. The lanes of a row's workgroup walk its features (pairs of them,
// blocks); every block starts on an even byte and fp8 rows hold an even number of bytes, so no two
// lanes share a half.

#include "common/kv_append_params.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

#ifdef ADVANCE
layout(std430, set = 0, binding = 5) buffer Lengths { int lengths[]; };
#else
layout(constant_id = 1) const uint IN_TYPE = 0;   // common/storage_types.glsl
layout(constant_id = 2) const uint K_OUT = 0;
layout(constant_id = 3) const uint V_OUT = 0;
#define TL_NAME load_k_new
#define TL_SLOT 1
#define TL_TYPE IN_TYPE
#include "common/typed_load.glsl"
#define TL_NAME load_v_new
#define TL_SLOT 2
#define TL_TYPE IN_TYPE
#include "common/typed_load.glsl"
#ifdef HALVES
#extension GL_EXT_shader_16bit_storage : require
#include "common/float_bits.glsl"
#include "common/quantize.glsl"
layout(std430, set = 0, binding = 3) writeonly buffer KCache { uint16_t k_cache[]; };
layout(std430, set = 0, binding = 4) writeonly buffer VCache { uint16_t v_cache[]; };
// fp8 caches' scales, [Hkv] K's then [Hkv] V's (1 for the other types).
layout(std430, set = 0, binding = 8) readonly buffer Scales { float scales[]; };
#else
layout(std430, set = 0, binding = 3) writeonly buffer KCache { float k_cache[]; };
layout(std430, set = 0, binding = 4) writeonly buffer VCache { float v_cache[]; };
#endif
layout(std430, set = 0, binding = 5) readonly buffer Lengths { int lengths[]; };
#endif
layout(std430, set = 0, binding = 6) readonly buffer Counts { int counts[]; };
#if defined(PAGED) && !defined(ADVANCE)
layout(std430, set = 0, binding = 7) readonly buffer BlockTable { int block_table[]; };
#endif

#ifndef ADVANCE
float load_new(bool v, uint index) { return v ? load_v_new(index, 1u).x : load_k_new(index, 1u).x; }

#ifdef HALVES
void store_half(bool v, uint at, uint half_bits) {
    if (v) v_cache[at] = uint16_t(half_bits);
    else k_cache[at] = uint16_t(half_bits);
}
#endif

// One row of D features from element `from` of the new rows into element `to` of the cache; `h` is
// the row's head (an fp8 cache's scale).
void store_row(bool v, uint to, uint from, uint D, uint h) {
#ifdef HALVES
    const uint type = v ? V_OUT : K_OUT;
    if (type == TYPE_F32) {
        for (uint d = gl_LocalInvocationID.x; d < D; d += WG) {
            const uint bits = floatBitsToUint(load_new(v, from + d));
            store_half(v, 2u * (to + d), bits & 0xffffu);
            store_half(v, 2u * (to + d) + 1u, bits >> 16);
        }
        return;
    }
    if (type == TYPE_F16 || type == TYPE_BF16) {
        for (uint d = gl_LocalInvocationID.x; d < D; d += WG) {
            const float x = load_new(v, from + d);
            store_half(v, to + d, type == TYPE_F16 ? half_bits(x) : bf16_bits(x));
        }
        return;
    }
    if (is_fp8(type)) {  // vLLM's fp8(x / scale), two bytes per half (D is even, so `to` is)
        const float scale = scales[(v ? P.Hkv : 0u) + h];
        for (uint pair = gl_LocalInvocationID.x; pair < D / 2u; pair += WG) {
            const uint lo = fp8_bits(div_rn(load_new(v, from + 2u * pair), scale), type);
            const uint hi = fp8_bits(div_rn(load_new(v, from + 2u * pair + 1u), scale), type);
            store_half(v, (to >> 1) + pair, lo | (hi << 8));
        }
        return;
    }
    const uint halves_per_block = block_halves(type);
    for (uint blk = gl_LocalInvocationID.x; blk < D / 32u; blk += WG) {
        float x[32];
        [[unroll]] for (uint j = 0u; j < 32u; j += 4u) {
            const vec4 x4 = v ? load_v_new(from + 32u * blk + j, 4u) : load_k_new(from + 32u * blk + j, 4u);
            [[unroll]] for (uint c = 0u; c < 4u; ++c) x[j + c] = x4[c];
        }
        uint halves[17];
        quantize_block(type, x, halves);
        const uint at = ((to >> 5) + blk) * halves_per_block;  // `to` starts a block: D is whole blocks
        [[unroll]] for (uint i = 0u; i < 17u; ++i)
            if (i < halves_per_block) store_half(v, at + i, halves[i]);
    }
#else
    for (uint d = gl_LocalInvocationID.x; d < D; d += WG) {
        if (v) v_cache[to + d] = load_new(true, from + d);
        else k_cache[to + d] = load_new(false, from + d);
    }
#endif
}
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
    store_row(false, k_to, k_from, P.Dk, h);
    store_row(true, v_to, v_from, P.Dv, h);
#endif
}

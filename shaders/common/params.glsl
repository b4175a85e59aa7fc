// The pieces every kernel's parameter block (binding 0, std140, named P) is built from. Each kernel
// declares its own block in common/<kernel>_params.glsl; engine/attention/params.hpp mirrors every
// struct field for field, and its static_asserts check the std140 offsets and sizes.
// std140: a struct member starts on a 16-byte boundary and its size rounds up to 16; scalars are
// 4-byte aligned. So the blocks hold scalars and uvec4s that are truly vectors, never scalar arrays.
#ifndef VKATTN_PARAMS_GLSL
#define VKATTN_PARAMS_GLSL

// A tensor bound as one slice of a buffer. Element (b, h, n, d) of the full tensor lives at
//   (b - origin.x)·stride.x + (h - origin.y)·stride.y + (n - origin.z)·stride.z + d·stride.w + origin.w
// within the binding: origin.xyz is the first (b, h, n) the slice holds and origin.w the element
// offset of that corner from the (aligned) start of the binding. Unsigned wrap-around is intended:
// the terms may underflow individually, the sum is exact.
struct TensorDesc {
    uvec4 stride;  // elements between consecutive b, h, n, d (bytes for the bool mask; 0 = broadcast)
    uvec4 origin;  // first b, h, n of the slice; element offset of that corner in the binding
};

// The attention problem: Q [B, Hq, Nq, Dk], K [B, Hkv, Nkv, Dk], V [B, Hkv, Nkv, Dv].
struct AttentionShape {
    uint B;      // batch
    uint Hq;     // query heads
    uint Hkv;    // key/value heads
    uint group;  // query heads per key/value head: Hq / Hkv
    uint Nq;     // queries per head
    uint Nkv;    // keys per head (the longest; per-batch key lengths are a mask)
    uint Dk;     // head dimension of Q and K
    uint Dv;     // head dimension of V and O
};

// The work of one dispatch: units from first_unit on, one per workgroup along a grid axis (a unit is a
// (batch, head) pair, numbered as its kernel says) and rows [first_row, first_row + rows) of each.
struct ChunkRange {
    uint first_unit;
    uint first_row;
    uint rows;
};

// The mask model and the features on the logits and weights, read by common/mask.glsl and
// common/philox.glsl (flash.comp and softmax.comp): the same for every dispatch of a request.
struct MaskParams {
    uint flags;          // MASK_* bits (mask.glsl; engine/attention/params.hpp's MaskFlag)
    int offset;          // the causal diagonal's offset: key j visible to query i when j <= i + offset
                         // (bottom-right alignment adds Nkv(b) - Nq)
    int window_left;     // keys before the diagonal a query sees; -1 = unbounded
    int window_right;    // keys after the diagonal a query sees; -1 = unbounded
    float softcap;       // logit cap c: s <- c·tanh(s / c); 0 = none
    float inv_softcap;   // 1 / c (0 without a cap)
    float keep_scale;    // dropout's scale of a kept weight: 1 / (1 - p)
    uint drop_threshold; // a weight is dropped when its Philox word is below this; 0 = no dropout
    uvec2 seed;          // dropout's Philox key: (low, high) word of the 64-bit seed
    // A block of a larger attention (vkattn::Block): the whole's key count (clamps the key lengths,
    // which count the whole's keys) and the call's (b, h, i, j) origin in it (keys before origin.w
    // are not the call's; dropout draws the whole's Philox numbers). Nkv and 0s for a whole call.
    uint key_total;
    uvec4 origin;
    TensorDesc bool_mask;   // bool mask, one byte per element, broadcast strides (0 on broadcast dims)
    TensorDesc float_mask;  // float mask (added to the logits), broadcast strides
};

// A paged K/V (the PAGED variants; vLLM's and flash_attn_with_kvcache's): K and V live in pools
// of blocks, shape [blocks, block_size, Hkv, D], and key n of sequence b is row n % block_size of
// block table[b·table_stride + n / block_size]. Block k lives in pool k / blocks_per_pool (a pool
// past one binding is several bindings of whole blocks). K's and V's pools share one layout in
// units of a row of D elements (row-major as FlashAttention's, or head-major within a block): row
// (block, r, head) starts at element (block·block_units + r·row_units)·D + head·stride.y +
// origin.w, where a pool's TensorDesc holds D in stride.w and the elements between heads in
// stride.y; origin.w is the first block's offset in its binding, the same in every pool.
struct PagedKv {
    uint block_size;
    uint table_stride;     // entries per sequence in the block table
    uint blocks_per_pool;  // every pool but the last holds exactly this many
    uint blocks;           // block ids are [0, blocks)
    uint block_shift;      // log2(block_size) when it is a power of two, else 32
    uint block_units;      // rows of D elements between blocks
    uint row_units;        // rows of D elements between a block's rows
};

// Variable-length batches (FlashAttention's varlen): Q, O and LSE (packed_q), and K and V
// (packed_k), hold every sequence's rows one after another: sequence b's row i is row cu[b] + i of
// the packed tensor, whose TensorDesc has batch stride 0 (common/varlen.glsl reads cu_seqlens).
struct Varlen {
    uint packed_q;  // 1: Q, O and LSE are packed by cu_seqlens_q
    uint packed_k;  // 1: K and V are packed by cu_seqlens_k
    uint total_q;   // rows of the packed Q (offsets and lengths are clamped to them)
    uint total_k;   // rows of the packed K and V
};

uint tensor_index(TensorDesc t, uint b, uint h, uint n) {
    return (b - t.origin.x) * t.stride.x + (h - t.origin.y) * t.stride.y +
           (n - t.origin.z) * t.stride.z + t.origin.w;
}

#endif

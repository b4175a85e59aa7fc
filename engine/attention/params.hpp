// The C++ twins of the kernels' parameter blocks (binding 0, std140): the shared pieces of
// shaders/common/params.glsl and one struct per kernel, each the twin of its
// shaders/common/<kernel>_params.glsl. The static_asserts pin every field's std140 offset and every
// size: change one side and the build fails here rather than the GPU reading garbage. Field
// meanings are commented in the GLSL; here only what the host must know to fill them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace vkattn::detail {

// std140 places a struct member on a 16-byte boundary and rounds its size up to 16: alignas(16).
struct alignas(16) TensorDesc {
    std::array<std::uint32_t, 4> stride{};  // b, h, n, d (element strides; bytes for the bool mask)
    std::array<std::uint32_t, 4> origin{};  // first b, h, n of the slice; element offset in binding
};

// Q [B, Hq, Nq, Dk], K [B, Hkv, Nkv, Dk], V [B, Hkv, Nkv, Dv]; group = Hq / Hkv.
struct alignas(16) AttentionShape {
    std::uint32_t B = 0, Hq = 0, Hkv = 0, group = 0, Nq = 0, Nkv = 0, Dk = 0, Dv = 0;
};

// A dispatch's units (numbered as its kernel says) from first_unit, and rows [first_row, +rows).
struct alignas(16) ChunkRange {
    std::uint32_t first_unit = 0, first_row = 0, rows = 0;
};

// The mask model and the features on logits and weights (mask.glsl, philox.glsl).
struct alignas(16) MaskParams {
    std::uint32_t flags = 0;        // MaskFlag bits
    std::int32_t offset = 0;        // the causal diagonal's offset
    std::int32_t window_left = 0;   // -1 = unbounded
    std::int32_t window_right = 0;  // -1 = unbounded
    float softcap = 0.0f;           // 0 = none
    float inv_softcap = 0.0f;       // 1 / softcap, 0 without one
    float keep_scale = 0.0f;        // 1 / (1 - p)
    std::uint32_t drop_threshold = 0;   // 0 = no dropout
    std::array<std::uint32_t, 2> seed{};  // the 64-bit seed's low, high word
    // A block of a larger attention (AttentionOptions::block): the whole's key count, which clamps
    // the key lengths (the whole's), and the call's (b, h, i, j) origin in it: keys before origin[3]
    // are not the call's, and dropout draws the whole's Philox numbers. 0s and Nkv for a whole call.
    std::uint32_t key_total = 0;
    alignas(16) std::array<std::uint32_t, 4> origin{};  // uvec4: 16-byte aligned
    TensorDesc bool_mask, float_mask;
};

// A paged K/V's addressing (PAGED variants): key n of sequence b is row n % block_size of block
// table[b·table_stride + n / block_size], in pool block / blocks_per_pool, at rows of D
// (block·block_units + row·row_units); the pools' TensorDescs hold D in stride.w and the elements
// between heads in stride.y.
struct alignas(16) PagedKv {
    std::uint32_t block_size = 0, table_stride = 0, blocks_per_pool = 0, blocks = 0;
    std::uint32_t block_shift = 32;  // log2(block_size) for a power of two, else 32 (the kernels divide)
    std::uint32_t block_units = 0, row_units = 0;
};

// Variable-length batches: Q/O/LSE (packed_q) and K/V (packed_k) hold every sequence's rows one
// after another, sequence b's from row cu_seqlens[b] (batch stride 0); totals clamp the offsets.
struct alignas(16) Varlen {
    std::uint32_t packed_q = 0, packed_k = 0;
    std::uint32_t total_q = 0, total_k = 0;
};

// flash.comp: units are (b, kv head), rows ρ = g·Nq + i over the group's query heads.
struct alignas(16) FlashParams {
    static constexpr std::string_view shader = "flash";
    AttentionShape shape;
    ChunkRange chunk;
    MaskParams mask;
    float scale = 0.0f;                // the softmax scale
    std::uint32_t keys_per_split = 0;  // split mode: split s holds keys [s·keys_per_split, +keys_per_split)
    std::uint32_t first_split = 0;     // split mode: the split of this dispatch's first z workgroup
    std::uint32_t first_column = 0;    // this column pass's first output column
    std::uint32_t o_split_stride = 0;  // split mode: elements between splits' partial O
    std::uint32_t lse_split_stride = 0;
    TensorDesc q, k, v, o, lse;        // o, lse: split 0's partials in split mode
    PagedKv paged;                     // PAGED variants only
    Varlen varlen;
};

// softmax.comp's modes (SoftmaxParams::mode; MODE_* in softmax_params.glsl).
enum SoftmaxMode : std::uint32_t { kWholeRows = 0, kRowStats = 1, kApply = 2 };
// SoftmaxParams::logits_stage (LOGITS_* in softmax_params.glsl): none, or 1 + vkattn::LogitsStage.
constexpr std::uint32_t kNoLogits = 0;

// softmax.comp: units are (b, query head), rows are queries.
struct alignas(16) SoftmaxParams {
    static constexpr std::string_view shader = "softmax";
    AttentionShape shape;
    ChunkRange chunk;
    MaskParams mask;
    std::uint32_t mode = kWholeRows;
    std::uint32_t key_begin = 0, key_end = 0;  // this dispatch's keys [key_begin, key_end)
    std::uint32_t slices = 0;                  // key slices per row
    std::uint32_t slice = 0;                   // this dispatch's key slice
    std::uint32_t logits_stage = kNoLogits;    // kNoLogits, or 1 + LogitsStage: what `logits` receives
    TensorDesc scores, lse;
    TensorDesc logits;  // AttentionOutputs::logits, written where P is
};

// bmm.comp: C = alpha·A·op(B) (+ bias or residual) per unit (b, head).
struct alignas(16) BmmParams {
    static constexpr std::string_view shader = "bmm";
    ChunkRange chunk;
    std::uint32_t M = 0, N = 0, K = 0;  // C is M×N per unit, K the inner dimension
    float alpha = 0.0f;
    std::uint32_t heads = 0;  // heads of A and C per batch
    std::uint32_t group = 0;  // heads of A per head of B
    std::uint32_t b_scale_at = 0;  // an fp8 B: head hb's scale is binding 5's [b_scale_at + hb]
    TensorDesc a, b, c, residual;  // residual: read with BmmAdd::residual only
};

// combine.comp: flash.comp's units and rows.
struct alignas(16) CombineParams {
    static constexpr std::string_view shader = "combine";
    AttentionShape shape;
    ChunkRange chunk;
    std::uint32_t splits = 0;
    std::uint32_t o_split_stride = 0;    // elements between splits' partial O
    std::uint32_t lse_split_stride = 0;  // elements between splits' partial lse
    std::uint32_t has_sinks = 0;         // 1 when the head terms hold sink logits
    TensorDesc partial_o, partial_lse, o, lse;
    Varlen varlen;                       // flash.comp's: O and LSE packed by cu_seqlens_q
};

// copy.comp (the bandwidth ceiling, vkattn/testing/benchmark.hpp).
struct alignas(16) CopyParams {
    static constexpr std::string_view shader = "copy";
    std::uint32_t count = 0;  // 16-byte words in the dispatch's bindings
};

// clock_probe.comp (vkattn/testing/clock_probe.hpp).
struct alignas(16) ClockProbeParams {
    static constexpr std::string_view shader = "clock_probe";
    std::uint32_t trips = 0;  // trips of 16 dependent FMAs
};

// The backward kernels (bwd_delta, bwd_sinks, bwd_q_*, bwd_kv_*: shaders/common/backward_params.glsl).
struct alignas(16) BackwardParams {
    static constexpr std::string_view shader = "bwd";
    AttentionShape shape;
    MaskParams mask;
    float scale = 0.0f;
    std::uint32_t first_column = 0;  // this column pass's first gradient column
    std::uint32_t rows = 0;          // bwd_delta: B·Hq·Nq
    std::uint32_t first_unit = 0;    // bwd_q / bwd_kv: the unit b·Hkv + hk of grid y = 0
    TensorDesc q, k, v, o, grad_out, lse, delta, dq, dk, dv;
    std::array<std::uint32_t, 4> mask_shape{};  // bwd_mask: the float mask's own rank-4 shape
    std::array<std::uint32_t, 4> mask_work{};   // bwd_mask: first broadcast index, count, mask elements, 0
    TensorDesc scores;                          // bwd_scores: S and dP, f32, by (b, hk, query row)
    std::array<std::uint32_t, 4> scores_work{}; // bwd_scores: query head g of each unit's group, first row, 0, keys padded to 4
};

// kv_append.comp (both modes): units are (b, kv head), rows are the cache's.
struct alignas(16) AppendParams {
    static constexpr std::string_view shader = "kv_append";
    std::uint32_t B = 0, Hkv = 0, capacity = 0, new_rows = 0, Dk = 0, Dv = 0;
    std::uint32_t has_counts = 0;  // 1: sequence b appends counts[b] rows, else all new_rows; 2: also packed
                                   // (its rows start at row counts[B + b] of the new K/V)
    std::uint32_t first_new = 0;   // the new row of grid x = 0
    ChunkRange chunk;
    TensorDesc k_new, v_new, k_cache, v_cache;
    PagedKv paged;           // PAGED variants only, as pool:
    std::uint32_t pool = 0;  // the pool this dispatch binds
};

static_assert(offsetof(TensorDesc, stride) == 0);
static_assert(offsetof(TensorDesc, origin) == 16);
static_assert(sizeof(TensorDesc) == 32);

static_assert(offsetof(AttentionShape, B) == 0);
static_assert(offsetof(AttentionShape, Hq) == 4);
static_assert(offsetof(AttentionShape, Hkv) == 8);
static_assert(offsetof(AttentionShape, group) == 12);
static_assert(offsetof(AttentionShape, Nq) == 16);
static_assert(offsetof(AttentionShape, Nkv) == 20);
static_assert(offsetof(AttentionShape, Dk) == 24);
static_assert(offsetof(AttentionShape, Dv) == 28);
static_assert(sizeof(AttentionShape) == 32);

static_assert(offsetof(ChunkRange, first_unit) == 0);
static_assert(offsetof(ChunkRange, first_row) == 4);
static_assert(offsetof(ChunkRange, rows) == 8);
static_assert(sizeof(ChunkRange) == 16);

static_assert(offsetof(MaskParams, flags) == 0);
static_assert(offsetof(MaskParams, offset) == 4);
static_assert(offsetof(MaskParams, window_left) == 8);
static_assert(offsetof(MaskParams, window_right) == 12);
static_assert(offsetof(MaskParams, softcap) == 16);
static_assert(offsetof(MaskParams, inv_softcap) == 20);
static_assert(offsetof(MaskParams, keep_scale) == 24);
static_assert(offsetof(MaskParams, drop_threshold) == 28);
static_assert(offsetof(MaskParams, seed) == 32);  // uvec2: 8-byte aligned
static_assert(offsetof(MaskParams, key_total) == 40);
static_assert(offsetof(MaskParams, origin) == 48);
static_assert(offsetof(MaskParams, bool_mask) == 64);
static_assert(offsetof(MaskParams, float_mask) == 96);
static_assert(sizeof(MaskParams) == 128);

static_assert(offsetof(FlashParams, shape) == 0);
static_assert(offsetof(FlashParams, chunk) == 32);
static_assert(offsetof(FlashParams, mask) == 48);
static_assert(offsetof(FlashParams, scale) == 176);
static_assert(offsetof(FlashParams, keys_per_split) == 180);
static_assert(offsetof(FlashParams, first_split) == 184);
static_assert(offsetof(FlashParams, first_column) == 188);
static_assert(offsetof(FlashParams, o_split_stride) == 192);
static_assert(offsetof(FlashParams, lse_split_stride) == 196);
static_assert(offsetof(FlashParams, q) == 208);
static_assert(offsetof(FlashParams, k) == 240);
static_assert(offsetof(FlashParams, v) == 272);
static_assert(offsetof(FlashParams, o) == 304);
static_assert(offsetof(FlashParams, lse) == 336);
static_assert(offsetof(FlashParams, paged) == 368);
static_assert(offsetof(FlashParams, varlen) == 400);
static_assert(sizeof(FlashParams) == 416);

static_assert(offsetof(Varlen, packed_q) == 0);
static_assert(offsetof(Varlen, packed_k) == 4);
static_assert(offsetof(Varlen, total_q) == 8);
static_assert(offsetof(Varlen, total_k) == 12);
static_assert(sizeof(Varlen) == 16);

static_assert(offsetof(PagedKv, block_size) == 0);
static_assert(offsetof(PagedKv, table_stride) == 4);
static_assert(offsetof(PagedKv, blocks_per_pool) == 8);
static_assert(offsetof(PagedKv, blocks) == 12);
static_assert(offsetof(PagedKv, block_shift) == 16);
static_assert(offsetof(PagedKv, block_units) == 20);
static_assert(offsetof(PagedKv, row_units) == 24);
static_assert(sizeof(PagedKv) == 32);

static_assert(offsetof(SoftmaxParams, shape) == 0);
static_assert(offsetof(SoftmaxParams, chunk) == 32);
static_assert(offsetof(SoftmaxParams, mask) == 48);
static_assert(offsetof(SoftmaxParams, mode) == 176);
static_assert(offsetof(SoftmaxParams, key_begin) == 180);
static_assert(offsetof(SoftmaxParams, key_end) == 184);
static_assert(offsetof(SoftmaxParams, slices) == 188);
static_assert(offsetof(SoftmaxParams, slice) == 192);
static_assert(offsetof(SoftmaxParams, logits_stage) == 196);
static_assert(offsetof(SoftmaxParams, scores) == 208);
static_assert(offsetof(SoftmaxParams, lse) == 240);
static_assert(offsetof(SoftmaxParams, logits) == 272);
static_assert(sizeof(SoftmaxParams) == 304);

static_assert(offsetof(BmmParams, chunk) == 0);
static_assert(offsetof(BmmParams, M) == 16);
static_assert(offsetof(BmmParams, N) == 20);
static_assert(offsetof(BmmParams, K) == 24);
static_assert(offsetof(BmmParams, alpha) == 28);
static_assert(offsetof(BmmParams, heads) == 32);
static_assert(offsetof(BmmParams, group) == 36);
static_assert(offsetof(BmmParams, b_scale_at) == 40);
static_assert(offsetof(BmmParams, a) == 48);
static_assert(offsetof(BmmParams, b) == 80);
static_assert(offsetof(BmmParams, c) == 112);
static_assert(offsetof(BmmParams, residual) == 144);
static_assert(sizeof(BmmParams) == 176);

static_assert(sizeof(CopyParams) == 16);
static_assert(sizeof(ClockProbeParams) == 16);
static_assert(offsetof(CombineParams, shape) == 0);
static_assert(offsetof(CombineParams, chunk) == 32);
static_assert(offsetof(CombineParams, splits) == 48);
static_assert(offsetof(CombineParams, o_split_stride) == 52);
static_assert(offsetof(CombineParams, lse_split_stride) == 56);
static_assert(offsetof(CombineParams, has_sinks) == 60);
static_assert(offsetof(CombineParams, partial_o) == 64);
static_assert(offsetof(CombineParams, partial_lse) == 96);
static_assert(offsetof(CombineParams, o) == 128);
static_assert(offsetof(CombineParams, lse) == 160);
static_assert(offsetof(CombineParams, varlen) == 192);
static_assert(sizeof(CombineParams) == 208);

static_assert(offsetof(BackwardParams, shape) == 0);
static_assert(offsetof(BackwardParams, mask) == 32);
static_assert(offsetof(BackwardParams, scale) == 160);
static_assert(offsetof(BackwardParams, first_column) == 164);
static_assert(offsetof(BackwardParams, rows) == 168);
static_assert(offsetof(BackwardParams, first_unit) == 172);
static_assert(offsetof(BackwardParams, q) == 176);
static_assert(offsetof(BackwardParams, grad_out) == 304);
static_assert(offsetof(BackwardParams, dv) == 464);
static_assert(offsetof(BackwardParams, mask_shape) == 496);
static_assert(offsetof(BackwardParams, mask_work) == 512);
static_assert(offsetof(BackwardParams, scores) == 528);
static_assert(offsetof(BackwardParams, scores_work) == 560);
static_assert(sizeof(BackwardParams) == 576);

static_assert(offsetof(AppendParams, B) == 0);
static_assert(offsetof(AppendParams, new_rows) == 12);
static_assert(offsetof(AppendParams, has_counts) == 24);
static_assert(offsetof(AppendParams, first_new) == 28);
static_assert(offsetof(AppendParams, chunk) == 32);
static_assert(offsetof(AppendParams, k_new) == 48);
static_assert(offsetof(AppendParams, v_new) == 80);
static_assert(offsetof(AppendParams, k_cache) == 112);
static_assert(offsetof(AppendParams, v_cache) == 144);
static_assert(offsetof(AppendParams, paged) == 176);
static_assert(offsetof(AppendParams, pool) == 208);
static_assert(sizeof(AppendParams) == 224);

// MaskParams::flags, as shaders/common/mask.glsl names them.
enum MaskFlag : std::uint32_t {
    kMaskCausal = 1,
    kMaskLengths = 2,
    kMaskBool = 4,
    kMaskFloat = 8,
    kMaskBottomRight = 16,
    kMaskAlibi = 32,
    kMaskSinks = 64,
};

struct Problem;
// The problem's shape, the same for every kernel.
AttentionShape attention_shape(const Problem& problem);
// Every mask and model feature of a problem, the same for every kernel; the mask tensors
// (bool_mask, float_mask) are left for the caller, which knows the slice it binds.
MaskParams mask_params(const Problem& problem);
// The per-head terms buffer (common/mask.glsl's head_terms): [Hq] ALiBi slopes, [Hq] sink logits,
// [Hkv] fp8 K scales, [Hkv] fp8 V scales; zeros (scales: ones) for those not given, empty when the
// problem has none of them.
std::vector<float> head_terms_of(const Problem& problem);

}  // namespace vkattn::detail

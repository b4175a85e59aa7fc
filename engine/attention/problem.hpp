// The resolved attention problem: every shape, stride, mask and option checked and reduced to plain
// numbers. resolve() is the single place where arguments are validated; the GPU drivers and the CPU
// reference both consume a Problem, so they cannot disagree about what a request means.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vkattn/attention.hpp"

namespace vkattn::detail {

// A mask broadcast to [B, Hq, Nq, Nkv]: element (b, h, i, j) lives at b*s0 + h*s1 + i*s2 + j*s3,
// with stride 0 on every broadcast dimension.
struct BroadcastMask {
    const void* data = nullptr;  // host data (the host API and the reference); null on the device path
    std::array<std::int64_t, 4> strides{};

    std::int64_t elements = 0;  // how many elements the mask really holds; 0 = no mask

    bool present() const { return elements > 0; }
    std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
        return b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3];
    }
};

// A mask of `shape` broadcast to `target` ([B, Hq, Nq, Nkv]): its strides there; InvalidArgument
// naming `name` when a dimension is neither 1 nor the target's, or the rank passes 4.
BroadcastMask broadcast_mask(const std::vector<std::int64_t>& shape, const char* name,
                             const std::array<std::int64_t, 4>& target);

struct Problem {
    std::int64_t B = 0, Hq = 0, Hkv = 0, Nq = 0, Nkv = 0, Dk = 0, Dv = 0;
    std::int64_t group = 1;  // Hq / Hkv: query head h reads key/value head h / group
    double scale = 1.0;
    DType dtype = DType::f32;  // q's and o's (f32, f16, bf16)
    DType k_dtype = DType::f32, v_dtype = DType::f32;  // any float or block type, each
    Causal causal = Causal::none;  // none, or on: top_left (a = offset) / bottom_right (a = len - Nq + offset)
    std::int64_t offset = 0;       // added to the alignment (options.causal_offset or diagonal_offset)
    bool bottom_right = false;     // the alignment adds len - Nq: causal bottom-right, or diagonal_bottom_right
    Window window;
    double softcap = 0.0;          // 0 = none
    std::vector<float> alibi;      // [Hq] slopes; empty = none
    std::vector<float> sinks;      // [Hq] sink logits; empty = none
    // [Hkv] scales of an fp8 k / v (1 where not given); empty for every other type.
    std::vector<float> k_scale, v_scale;
    double dropout = 0.0;
    std::uint32_t drop_threshold = 0;  // dropout_threshold(dropout); 0 = nothing dropped
    std::uint64_t seed = 0;
    // [B], in the whole's keys (key_total where not given). On the device path the lengths live on
    // the device: key_total here, an upper bound (flops() then counts every key).
    std::vector<std::int32_t> kv_len;
    // A block of a larger attention (AttentionOptions::block): the call's (b, h, i, j) origin in the
    // whole and the whole's key count (Nkv for a whole call). `offset` is then the block's own:
    // the whole's, moved by the origin and, bottom-right, by the whole's query count.
    std::array<std::int64_t, 4> origin{};
    std::int64_t key_total = 0;
    bool has_kv_lengths = false;
    bool paged_kv = false;  // K and V read through a paged cache's block table (AttentionSpec::paged)
    // Varlen: Q/O/LSE (and K/V) packed; totals are their rows. Nq and Nkv are the max_seqlens.
    bool packed_q = false, packed_k = false;
    std::int64_t total_q = 0, total_k = 0;
    BroadcastMask bool_mask, float_mask;
    bool want_weights = false, want_lse = false, want_logits = false;
    LogitsStage logits_stage = LogitsStage::masked;

    // The three-stage path's own outputs (the fused kernels never hold a whole score row).
    bool wants_score_rows() const { return want_weights || want_logits; }

    // The diagonal's offset for batch b: causal keeps key j for query i when j <= i + alignment(b);
    // the window and ALiBi are measured from the same diagonal.
    std::int64_t alignment(std::int64_t b) const {
        return offset + (bottom_right ? std::int64_t{kv_len[b]} - Nq : 0);
    }

    // The keys [first, limit) that the structural mask (key length, causal, window) leaves to query
    // i of batch b; empty when first >= limit.
    struct KeyRange {
        std::int64_t first, limit;
    };
    KeyRange key_range(std::int64_t b, std::int64_t i) const {
        const std::int64_t at = i + alignment(b);
        std::int64_t limit = std::min<std::int64_t>(kv_len[b] - origin[3], Nkv);
        if (causal != Causal::none) limit = std::min(limit, at + 1);
        if (window.right >= 0) limit = std::min(limit, at + window.right + 1);
        const std::int64_t first = window.left >= 0 ? std::max<std::int64_t>(at - window.left, 0) : 0;
        return {first, std::max<std::int64_t>(limit, 0)};
    }

    // The boolean part of the mask model (key lengths, causal, window, bool mask): false = masked.
    bool key_visible(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
        const KeyRange range = key_range(b, i);
        if (j < range.first || j >= range.limit) return false;
        if (bool_mask.present() &&
            static_cast<const std::uint8_t*>(bool_mask.data)[bool_mask.offset(b, h, i, j)] == 0)
            return false;
        return true;
    }

    // The additive part: the float mask's value plus the ALiBi bias -slope_h·|i + a - j|.
    double additive(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
        double sum = 0.0;
        if (float_mask.present())
            sum += static_cast<const float*>(float_mask.data)[float_mask.offset(b, h, i, j)];
        if (!alibi.empty())
            sum -= static_cast<double>(alibi[static_cast<std::size_t>(h)]) *
                   static_cast<double>(std::abs(i + alignment(b) - j));
        return sum;
    }

    // The logit of a scaled score: softcap, then the additive terms; -inf where masked. The one
    // definition of everything before the softmax.
    double logit(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j, double scaled_score) const {
        return logit_at(LogitsStage::masked, b, h, i, j, scaled_score);
    }
    // The same logit at an earlier stage (AttentionOutputs::logits).
    double logit_at(LogitsStage stage, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j,
                    double scaled_score) const {
        if (stage == LogitsStage::scaled) return scaled_score;
        const double s = softcap > 0.0 ? softcap * std::tanh(scaled_score / softcap) : scaled_score;
        if (stage == LogitsStage::softcapped) return s;
        if (!key_visible(b, h, i, j)) return -std::numeric_limits<double>::infinity();
        return s + additive(b, h, i, j);
    }

    // The sink logit of query head h (-inf: none), which joins the softmax denominator only.
    double sink(std::int64_t h) const {
        return sinks.empty() ? -std::numeric_limits<double>::infinity()
                             : static_cast<double>(sinks[static_cast<std::size_t>(h)]);
    }

    // Dropout: whether weight (b, h, i, j) survives, and the factor the survivors are scaled by.
    bool kept(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const;
    double keep_scale() const { return 1.0 / (1.0 - dropout); }

    std::int64_t kv_head(std::int64_t h) const { return h / group; }
    // Query-key pairs the structural mask leaves visible, over every batch, head and row.
    double visible_pairs() const;
    // 2·(Dk + Dv) per visible pair: 4·B·Hq·Nq·Nkv·D without masks, about half that when causal.
    double flops() const;
};

// What a request is, without its data: the tensors' dtypes, shapes and strides, which optional
// inputs and outputs it has, the per-head constants and the options. Plans are made from this.
struct TensorLayout {
    DType dtype = DType::f32;
    std::array<std::int64_t, 4> shape{}, strides{};
};
// A paged K/V's geometry (vkattn::DevicePagedKv); the spec's k and v are then the virtual
// [B, Hkv, table_stride · block_size, D] tensors it stands for.
struct PagedSpec {
    std::int64_t block_size = 0;
    std::int64_t table_stride = 0;     // block-table entries per sequence
    std::int64_t blocks_per_pool = 0;  // every pool but the last holds exactly this many
    std::int64_t blocks = 0;           // over every pool
    std::int64_t pools = 0;
    // The pools' layout in rows of D elements: between blocks, a block's rows, heads (K's and V's
    // alike: row-major [blocks, block_size, Hkv] is {block_size·Hkv, Hkv, 1}).
    std::array<std::int64_t, 3> units{};
    std::uint64_t k_pool_bytes = 0, v_pool_bytes = 0;  // the first (largest) pool's span
};

// A varlen call's packed tensors (vkattn::DeviceVarlen); the spec's q, o (and k, v when packed)
// are then the virtual [B, H, max_seqlen, D] tensors with batch stride 0 they stand for: sequence
// b's row i is packed row cu_seqlens[b] + i, which only the device knows.
struct VarlenSpec {
    TensorLayout q, o;                 // [1, Hq, total_q, D]
    std::optional<TensorLayout> k, v;  // [1, Hkv, total_k, D], with cu_seqlens_k
};

struct AttentionSpec {
    TensorLayout q, k, v, o;
    std::optional<PagedSpec> paged;
    std::optional<VarlenSpec> varlen;
    bool kv_lengths = false;
    std::optional<std::vector<std::int64_t>> bool_mask, float_mask;  // the masks' shapes
    bool weights = false, lse = false, logits = false;
    std::vector<float> alibi_slopes, sinks;
    std::vector<float> k_scale, v_scale;  // [1] or [Hkv]; empty = 1
    AttentionOptions options;

    // Every field, serialised: equal keys, equal plans.
    std::string key() const;
};

// An fp8 tensor's scales (vLLM's k_scale / v_scale), [1] or [Hkv] given, [Hkv] resolved (1 where
// none is given; empty for other types); each finite and above 0. A scale for another type is
// refused rather than ignored. InvalidArgument naming `name` (`tensor` is "k" or "v").
std::vector<float> resolve_fp8_scale(std::span<const float> given, DType dtype, std::int64_t Hkv, const char* name,
                                     const char* tensor);
// Resolved K and V scales as the shaders read them: [Hkv] K's then [Hkv] V's, 1 for a tensor that
// has none (the tail of the per-head terms, and a cache's append scales).
std::vector<float> fp8_scale_terms(const std::vector<float>& k_scale, const std::vector<float>& v_scale, std::int64_t Hkv);

// "[a, b, c, d]": a shape or strides in an error message.
std::string shape_text(const std::array<std::int64_t, 4>& shape);

// A mask's shape (rank 0..4) right-aligned to rank 4 with leading 1s, as broadcasting aligns it.
inline std::array<std::int64_t, 4> rank4(const std::vector<std::int64_t>& shape) {
    std::array<std::int64_t, 4> out{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), out.begin() + static_cast<std::ptrdiff_t>(4 - shape.size()));
    return out;
}

// A tensor's shape and strides: every dimension at least 1, strides not negative, features contiguous,
// rows of a block type on blocks, a span that 64 bits can count. InvalidArgument naming `name`.
void check_layout(const TensorLayout& view, const char* name);
// Whether distinct elements of an output view lie in distinct memory.
bool elements_disjoint(const TensorLayout& view);

// Validates everything a spec holds and resolves defaults. Throws InvalidArgument naming the
// argument. The single place where shapes and options are checked.
Problem resolve(const AttentionSpec& spec);

// The spec of host views (their data pointers aside).
AttentionSpec spec_of(const AttentionInputs& inputs, const AttentionOutputs& outputs, const AttentionOptions& options);

// resolve(spec_of(...)) plus the host data: pointers present, key lengths in range, masks' data.
Problem resolve(const AttentionInputs& inputs, const AttentionOutputs& outputs,
                const AttentionOptions& options);

// The backward pass's own tensors, without their data: dL/dO (o's shape and dtype; it may broadcast
// with stride 0) and the gradients asked for.
struct BackwardSpec {
    TensorLayout grad_out;
    std::optional<TensorLayout> dq, dk, dv;
    bool d_sinks = false, d_float_mask = false;
};
// The one set of backward checks, after the forward's (resolve): grad_out, the gradients each of its
// input's shape and dtype in memory of its own, d_sinks only with sinks and d_float_mask only with
// a float mask. InvalidArgument naming the argument (grad_out, dq, dk, dv, d_sinks, d_float_mask).
void check_backward(const Problem& problem, const AttentionSpec& forward, const BackwardSpec& backward);
// k and v are float types (a quantized tensor is not trained); InvalidArgument naming k or v.
void check_backward_types(DType k, DType v);
// The backward on host data (vkattn::reference_attention_backward, vkattn::attention_backward):
// check_backward_types, resolve() of the forward, the data pointers, check_backward.
Problem resolve_backward(const AttentionInputs& inputs, const TensorView& grad_out, const AttentionGradients& grads,
                         const AttentionOptions& options);

// Checked 64-bit arithmetic for sizes: throws ResourceLimit on overflow, naming what was computed.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what);

}  // namespace vkattn::detail

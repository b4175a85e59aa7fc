// The one tuning function: from what the device is and what the problem is, choose every kernel
// variant and size. Pure (no Vulkan), so tests drive it with made-up devices.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "attention/decode.hpp"
#include "attention/problem.hpp"
#include "attention/tile.hpp"
#include "tensor/storage_rules.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

struct BmmConfig {
    // bmm_tile.comp (GemmKernel::tile): wg_m × wg_n invocations of 8×8 outputs (tm = 8, tn4 = 2),
    // K slices of 4·ks4 double-buffered in shared memory; word loads. The two fields below are then
    // false. Otherwise bmm.comp.
    bool tile = false;
    bool texel = false;         // texel-buffer vec4 loads (else scalar SSBO loads)
    bool shared_tiles = false;  // K-slices staged through shared memory
    std::uint32_t wg_m = 8, wg_n = 8;  // invocations per workgroup along rows and columns
    std::uint32_t tm = 4, tn4 = 1;     // register block: tm rows × 4·tn4 columns per invocation
    std::uint32_t ks4 = 4;             // vec4s of K per shared tile
    std::uint32_t block_rows() const { return wg_m * tm; }
    std::uint32_t block_cols() const { return wg_n * 4 * tn4; }
    // Shared memory the kernel declares: bmm_tile.comp's two buffers of 4·ks4 k-rows of A's and
    // B's tiles, each row block/4 + 1 vec4s (the pitch that keeps its transposing stores off bank
    // conflicts); bmm.comp's one K-slice of both tiles, or none.
    std::uint64_t shared_bytes() const;
    std::string describe() const;
};

// Which operand bmm.comp reads transposed: C = A·Bᵀ (B stored [N][K]: scores, projections), A·B,
// or Aᵀ·B (A stored [K][M]: the backward's dV, dK and weight gradients; no shared tiles).
enum class BmmForm : std::uint8_t { a_bt, a_b, at_b };

struct SoftmaxConfig {
    bool subgroup_ops = true;
    std::uint32_t workgroup = 64;  // a power of two
    std::string describe() const;
};

struct UnfusedConfig {
    BmmConfig scores;  // stage 1: S = scale·Q·Kᵀ
    SoftmaxConfig softmax;
    BmmConfig output;  // stage 3: O = P·V
    std::string describe() const;
};

struct FusedConfig {
    bool texel = false;              // Q/K/V through texel views (needs 4-aligned rows)
    bool texel_words = false;        // texel: R32_UINT views of every operand, decoded per type (else float views)
    std::uint32_t subgroup = 8;      // SG: lanes per subgroup, required of the pipeline where possible
    bool require_subgroup = false;   // the device can require SG (subgroup size control)
    std::uint32_t subgroups = 8;     // NSG: subgroups per workgroup
    std::uint32_t rows = 8;          // R: query rows per subgroup
    std::uint32_t keys_per_lane = 8; // KL: a key block is SG·KL keys
    std::uint32_t dv4 = 2;           // output vec4 slots per lane per pass (at most 4)
    std::uint32_t column_passes = 1; // passes over the output columns: ceil(Dv / (4·SG·dv4))
    // K/V blocks staged once per workgroup in shared memory (GPUs) instead of streamed by each
    // subgroup (CPU devices); K in chunks of kd4 vec4s per key.
    bool staged = false;
    std::uint32_t kd4 = 8;
    std::uint32_t v_width4 = 16;     // vec4 columns of V staged per key: min(SG·dv4, ceil(Dv / 4))
    // The GPU decode kernel (flash_decode.comp, split runs only): every subgroup holds the
    // workgroup's `rows` rows and walks its own keys, LPK lanes per key (attention/decode.hpp).
    // The fields above then say: subgroup, require_subgroup, subgroups, rows; one column pass.
    std::optional<DecodeLayout> decode;
    // The GPU prefill kernel (flash_tile.comp, fused or split runs): FlashAttention-2's tiles
    // (attention/tile.hpp). The fields above then say: subgroup, require_subgroup, subgroups;
    // column_passes of tile->columns each.
    std::optional<TileLayout> tile;
    // The view through which the texel variants read an operand of type t (the bindings are storage
    // buffers when the config reads words).
    TexelView view(DType t) const { return texel_words ? TexelView::r32ui : float_view(t); }
    std::uint32_t columns_per_pass() const { return tile ? tile->columns : 4 * subgroup * dv4; }
    // Keys of one block (flash.comp) or of one workgroup step (flash_decode.comp): splits hold whole ones.
    std::uint32_t key_block() const {
        return decode ? decode_step_keys(*decode, subgroup, subgroups) : tile ? tile->keys() : subgroup * keys_per_lane;
    }
    std::uint32_t rows_per_workgroup() const {
        return decode ? rows : tile ? tile->rows(subgroup, subgroups) : subgroups * rows;
    }
    // flash.comp's tiles when staged: K [kd4][key block + 1] and V [key block][v_width4], in vec4s.
    // Plus the workgroup's key range (two uints).
    std::uint32_t shared_bytes() const { return staged ? 16 * (kd4 * (key_block() + 1) + key_block() * v_width4) + 8 : 0; }
    std::string describe() const;
};

// The fused kernel's configuration, or the reason it cannot run on this device / shape (empty
// optional, reason in *why).
std::optional<FusedConfig> choose_fused(const vk::DeviceCaps& caps, const Problem& problem,
                                        const std::array<std::int64_t, 4>& q_strides,
                                        const std::array<std::int64_t, 4>& k_strides,
                                        const std::array<std::int64_t, 4>& v_strides,
                                        const VariantOverrides& overrides, std::string* why);

// `base` (choose_fused's) turned into the GPU prefill kernel's config (attention/tile.cpp): words from
// storage buffers, as many column passes as OC columns need. Empty with the reason in *why where its
// smallest tiles do not fit the device's shared memory; overrides.tile_rows/tile_keys force its tile
// (choose_tile_layout).
std::optional<FusedConfig> tile_config(FusedConfig base, const vk::DeviceCaps& caps, const Problem& problem,
                                       const VariantOverrides& overrides, std::string* why);

// `base` (choose_fused's) turned into the GPU decode kernel's config for this problem
// (attention/decode.cpp): 4 subgroups where the device allows, rows fitted to the unit's, words
// from storage buffers. Empty with the reason in *why when the device cannot run it;
// overrides.decode_lanes_per_key forces its lanes per key.
std::optional<FusedConfig> decode_config(FusedConfig base, const vk::DeviceCaps& caps, const Problem& problem,
                                         const VariantOverrides& overrides, std::string* why);

// The backward kernels (flash_bwd_q.comp, flash_bwd_kv.comp; docs/design/TRAINING.md): flash.comp's
// streamed layout, reading words (any float type).
struct BackwardConfig {
    bool texel = false;                // q, k, v, dO through texel views (needs 4-aligned rows)
    bool texel_words = false;          // texel: R32_UINT views decoded per type (else float views)
    std::uint32_t subgroup = 8;        // SG, required of the pipelines where possible
    bool require_subgroup = false;
    std::uint32_t subgroups = 8;       // NSG per workgroup
    std::uint32_t q_rows = 8;          // dQ: query rows per subgroup
    std::uint32_t q_keys_per_lane = 8; // dQ: a key block is SG·this
    std::uint32_t kv_keys = 8;         // dK/dV: keys per subgroup
    std::uint32_t kv_rows_per_lane = 8;  // dK/dV: a query block is SG·this
    std::uint32_t slots = 2;           // gradient vec4 columns per lane per pass (at most 4)
    std::uint32_t column_passes = 1;   // ceil(max(Dk, Dv) / (4·SG·slots))
    std::uint32_t columns_per_pass() const { return 4 * subgroup * slots; }
    // The view through which the texel variants read an operand of type t.
    TexelView view(DType t) const { return texel_words ? TexelView::r32ui : float_view(t); }
    std::string describe() const;
};
// grad_out's strides join q's, k's and v's in the texel rule (they are read alike).
std::optional<BackwardConfig> choose_backward(const vk::DeviceCaps& caps, const Problem& problem,
                                              const std::array<std::int64_t, 4>& q_strides,
                                              const std::array<std::int64_t, 4>& k_strides,
                                              const std::array<std::int64_t, 4>& v_strides,
                                              const std::array<std::int64_t, 4>& grad_out_strides,
                                              const VariantOverrides& overrides, std::string* why);
// The most keys (dQ) or queries per query head (dK/dV) one workgroup may visit before lavapipe's
// loop budget runs out (0 = unlimited): the backward refuses longer sequences on such devices.
std::int64_t backward_keys_limit(const vk::DeviceCaps& caps, const BackwardConfig& config, const Problem& problem);
std::int64_t backward_queries_limit(const vk::DeviceCaps& caps, const BackwardConfig& config, const Problem& problem);
// Why the fused backward cannot run this problem on this device (its grid, its loop budget:
// backward_keys_limit, backward_queries_limit), naming the tensor; empty when it can. Automatic
// choice takes three stages then; a forced fused backward refuses with it.
std::string backward_fused_misfit(const vk::DeviceCaps& caps, const BackwardConfig& config, const Problem& problem);

// The three-stage backward (docs/design/TRAINING.md): per query head of each group and block of
// query rows, S = scale·Q·Kᵀ and dP = dO·Vᵀ (bmm), dS and P̃ in place (bwd_scores.comp), then
// dQ = scale·dS·K, dV += P̃ᵀ·dO and dK += scale·dSᵀ·Q (bmm, the last two with a transposed A).
struct UnfusedBackwardConfig {
    bool texel = false;  // every product reads texels (q, k, v, dO rows on 4 elements; f32/f16)
    BmmConfig scores;    // S and dP: A·Bᵀ
    BmmConfig dq;        // dQ: A·B
    BmmConfig dkv;       // dK, dV: Aᵀ·B
    std::string describe() const;
};
UnfusedBackwardConfig choose_unfused_backward(const vk::DeviceCaps& caps, const Problem& problem,
                                              const std::array<std::int64_t, 4>& q_strides,
                                              const std::array<std::int64_t, 4>& k_strides,
                                              const std::array<std::int64_t, 4>& v_strides,
                                              const std::array<std::int64_t, 4>& grad_out_strides,
                                              const VariantOverrides& overrides);
// The most keys (the inner dimension of dQ = dS·K) and query rows per block (of dK, dV) one bmm
// invocation may loop over on devices with a loop budget (0 = unlimited).
std::int64_t unfused_backward_inner_limit(const vk::DeviceCaps& caps);

// bwd_mask.comp: how many broadcast terms one dispatch may sum per mask element (0 = all).
std::int64_t backward_mask_terms_per_dispatch(const vk::DeviceCaps& caps, const Problem& problem);

// How many key slices split-KV decoding should use so that the device is filled, each with keys to
// work on; 1 means the row blocks alone fill it, and `auto` then runs the fused path.
std::uint32_t choose_splits(const vk::DeviceCaps& caps, const Problem& problem, const FusedConfig& config,
                            unsigned host_threads);

// Loop budgets (DeviceCaps::max_loop_iterations): the most keys one workgroup may visit in one
// dispatch before its loops would run out of iterations; 0 = unlimited. flash.comp iterates
// 1 + ceil(Dk/4) + SG times per key block (staged, also once per tile load pass); bmm.comp's P·V
// once per 4 keys; softmax.comp twice per WG keys of a row. The planners cut the keys below these
// (a fused request becomes split-KV).
std::int64_t fused_keys_per_dispatch(const vk::DeviceCaps& caps, const FusedConfig& config, const Problem& problem);
std::int64_t unfused_keys_per_dispatch(const vk::DeviceCaps& caps, const UnfusedConfig& config);

// Whether rows of `view` can be read as vec4 texels: feature stride 1 and every other stride a
// multiple of 4 elements (so every row starts on a texel).
bool texel_aligned(const std::array<std::int64_t, 4>& strides, std::int64_t row_length);

UnfusedConfig choose_unfused(const vk::DeviceCaps& caps, const Problem& problem,
                             const std::array<std::int64_t, 4>& q_strides,
                             const std::array<std::int64_t, 4>& k_strides,
                             const std::array<std::int64_t, 4>& v_strides,
                             const VariantOverrides& overrides);

// One product of the multi-head layer (its projections Y = X·Wᵀ + b; its backward's dX = dY·W and
// dW = dYᵀ·X): texel loads where `aligned` (every row read through a texel view
// starts on 4 elements and holds a multiple of 4), `types` have float views and the largest operand
// is within the texel limit. A transposed A never stages shared tiles: bmm.comp reads it as an outer
// product, TM rows (a multiple of 4) per vec4.
BmmConfig choose_product(const vk::DeviceCaps& caps, std::initializer_list<DType> types, bool aligned,
                         std::uint64_t largest_operand_bytes, BmmForm form, const VariantOverrides& overrides);

// The GEMM ceiling's configuration: the same bmm shader, tuned for one large square product.
BmmConfig choose_gemm(const vk::DeviceCaps& caps, std::int64_t m, std::int64_t n, std::int64_t k,
                      const VariantOverrides& overrides);

}  // namespace vkattn::detail

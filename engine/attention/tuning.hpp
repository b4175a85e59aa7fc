// The one tuning function: from what the device is and what the problem is, choose every kernel
// variant and size. Pure (no Vulkan), so tests drive it with made-up devices.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "attention/coopmat_backward.hpp"
#include "attention/coopmat_tile.hpp"
#include "attention/decode.hpp"
#include "attention/product_tuning.hpp"
#include "attention/problem.hpp"
#include "attention/tile.hpp"
#include "tensor/storage_rules.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

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
    // The cooperative-matrix prefill kernel (flash_coopmat.comp, fused or split runs; chosen where
    // coopmat_by_default holds, else forced):
    // 16 rows per subgroup (attention/coopmat_tile.hpp). The fields above then say: subgroup,
    // require_subgroup, subgroups; column_passes of coopmat->columns() each.
    std::optional<CoopmatLayout> coopmat;
    // The view through which the texel variants read an operand of type t (the bindings are storage
    // buffers when the config reads words).
    TexelView view(DType t) const { return texel_words ? TexelView::r32ui : float_view(t); }
    std::uint32_t columns_per_pass() const {
        return coopmat ? coopmat->columns() : tile ? tile->columns : 4 * subgroup * dv4;
    }
    // Keys of one block (flash.comp) or of one workgroup step (flash_decode.comp): splits hold whole ones.
    std::uint32_t key_block() const {
        return decode    ? decode_step_keys(*decode, subgroup, subgroups)
               : tile    ? tile->keys()
               : coopmat ? coopmat->keys
                         : subgroup * keys_per_lane;
    }
    std::uint32_t rows_per_workgroup() const {
        return decode ? rows : tile ? tile->rows(subgroup, subgroups) : coopmat ? coopmat->rows(subgroups) : subgroups * rows;
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

// `base` (choose_fused's) turned into the cooperative-matrix kernel's config (attention/coopmat_tile.cpp):
// words from storage buffers, as many column passes as its columns need. Throws InvalidArgument
// ("variant.fused_kernel", or the tile knob it cannot take) where it cannot run: storage
// coopmat_operands refuses (f16 beside bf16; bf16 on units that do not take it), or tiles that do
// not fit the device's shared memory. `kv_tensor_loads`: the workgroup-matrix kernel's K/V may be
// read by tensor loads (attention/workgroup_matrices.hpp's kv_tensor_loads), else it stages them.
FusedConfig coopmat_config(FusedConfig base, const vk::DeviceCaps& caps, const Problem& problem,
                           const VariantOverrides& overrides, bool kv_tensor_loads);

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
    // The kernels on cooperative matrices (flash_bwd_*_coopmat.comp; VariantOverrides::fused_kernel =
    // coopmat, or chosen as choose_backward says): 16 rows (keys) per subgroup, so q_rows = kv_keys =
    // 16; words from storage buffers; column passes of coopmat->columns() each.
    std::optional<CoopmatBackwardLayout> coopmat;
    std::uint32_t columns_per_pass() const { return coopmat ? coopmat->columns() : 4 * subgroup * slots; }
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

}  // namespace vkattn::detail

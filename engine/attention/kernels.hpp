// Kernel lookup by value: a shader variant's name and its specialization constants, built in one
// place per shader with a named constant per field.
#pragma once

#include "attention/problem.hpp"
#include "attention/tuning.hpp"
#include "vk/pipeline.hpp"

namespace vkattn::detail {

class Runtime;

// What bmm.comp adds to alpha·A·op(B), read from binding 4 (fp32; every variant declares it: bind a
// placeholder without an addend): a bias per column of C, or a residual tensor addressed by
// BmmParams::residual.
enum class BmmAdd : std::uint32_t { none = 0, bias = 1, residual = 2 };

// The code of a storage type in the shaders (common/storage_types.glsl).
std::uint32_t shader_type_code(DType dtype);

// bmm.comp: A's and B's storage types (texel variants: f32/f16 only), C's.
const vk::Kernel& bmm_kernel(Runtime& runtime, const BmmConfig& config, BmmForm form, DType a, DType b, DType c,
                             BmmAdd add = BmmAdd::none);
const vk::Kernel& softmax_kernel(Runtime& runtime, const SoftmaxConfig& config);
// The pools (bindings) of K and of V that the paged flash variants can read.
constexpr std::uint32_t kMaxPagedPools = 4;

// The storage types of an attention call's operands: o has q's.
struct OperandTypes {
    DType q = DType::f32, k = DType::f32, v = DType::f32;
};
inline OperandTypes operand_types(const Problem& p) { return {p.dtype, p.k_dtype, p.v_dtype}; }

// flash.comp; `split` writes fp32 partials for combine.comp; `paged_pools` > 0 reads K and V from
// that many pools of a paged cache through its block table. Texel configs read f32/f16 only.
const vk::Kernel& flash_kernel(Runtime& runtime, const FusedConfig& config, const OperandTypes& types, bool split,
                               std::uint32_t paged_pools = 0);
// flash_decode.comp (config.decode set): fp32 split partials; `wide` loads plain-type chunks as
// one uvec4 (every row on 16 bytes: decode_wide_rows, decode_wide_pool).
const vk::Kernel& flash_decode_kernel(Runtime& runtime, const FusedConfig& config, const OperandTypes& types,
                                      bool wide, std::uint32_t paged_pools = 0);
// flash_tile.comp (config.tile set): O as q's type, or fp32 partials for combine.comp (`split`).
const vk::Kernel& flash_tile_kernel(Runtime& runtime, const FusedConfig& config, const OperandTypes& types, bool split,
                                    std::uint32_t paged_pools = 0);
// flash_coopmat.comp (config.coopmat set): O as q's type, or fp32 partials (`split`); `wide`: f16 K
// and V whose rows all start on 16 bytes and hold whole 8-element chunks (one uvec4 load each).
const vk::Kernel& flash_coopmat_kernel(Runtime& runtime, const FusedConfig& config, const OperandTypes& types, bool split,
                                       std::uint32_t paged_pools = 0, bool wide = false);
const vk::Kernel& combine_kernel(Runtime& runtime, DType dtype);
// The backward kernels (docs/design/TRAINING.md): Δ over o and dO of `o` dtype; the sinks'
// gradient; dQ stored as q's type; dK and dV as k's and v's.
const vk::Kernel& bwd_delta_kernel(Runtime& runtime, DType o);
const vk::Kernel& bwd_sinks_kernel(Runtime& runtime);
const vk::Kernel& bwd_mask_kernel(Runtime& runtime, const OperandTypes& types);
const vk::Kernel& bwd_scores_kernel(Runtime& runtime);
const vk::Kernel& bwd_q_kernel(Runtime& runtime, const BackwardConfig& config, const OperandTypes& types);
const vk::Kernel& bwd_kv_kernel(Runtime& runtime, const BackwardConfig& config, const OperandTypes& types);
// kv_append.comp: rows of `in` dtype into K and V caches of `k_out` and `v_out` dtypes (contiguous
// or paged); and the lengths' advance.
const vk::Kernel& kv_append_kernel(Runtime& runtime, DType in, DType k_out, DType v_out, bool paged = false);
const vk::Kernel& kv_advance_kernel(Runtime& runtime);
// copy.comp: the bandwidth ceiling's copy in 16-byte words.
const vk::Kernel& copy_kernel(Runtime& runtime);
// clock_probe.comp: needs DeviceCaps::subgroup_clock.
const vk::Kernel& clock_probe_kernel(Runtime& runtime);
// shaders/cm2_probe.comp on `invocations` (workgroup_probe_invocations;
// vkattn/testing/workgroup_matrix_probe.hpp; built where the workgroup-matrix kernels are).
const vk::Kernel& workgroup_probe_kernel(Runtime& runtime, std::uint32_t invocations);

}  // namespace vkattn::detail

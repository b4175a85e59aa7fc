// The workgroup-matrix forward (shaders/flash_cm2.comp; issue #33, docs/design/GPU_KERNELS.md
// "Workgroup matrices"): flash_coopmat.comp's contract on VK_NV_cooperative_matrix2's
// workgroup-scope matrices, which the driver lays over the workgroup and feeds by tensor loads.
// What it takes of a problem and a device, as a CoopmatLayout with workgroup_matrices set. Pure (no
// Vulkan).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "attention/coopmat_backward.hpp"
#include "attention/coopmat_tile.hpp"
#include "attention/product_tuning.hpp"

namespace vkattn::detail {

// flash_cm2.comp's shared memory with layout `t` (workgroup_matrices set) and `subgroups`: per row
// its facts (key range, head, query, Q's, O's and lse's indices: 8 words) and its RowMask (11
// words), and the workgroup's key ranges (4 words); staged, K's tile then V's (f16, Bc rows of the
// wider of 16·dk_tiles and O's columns, padded by 8). On the units the driver keeps
// DeviceCaps::workgroup_matrix_reserved_shared more for the matrices; the portable implementation
// (common/wg_matrix.glsl) holds the operands Q, K, P and V as f16 pairs and S's shape of fp32 for
// the row reductions.
std::uint32_t workgroup_matrix_shared_bytes(const CoopmatLayout& t, std::uint32_t subgroups);

// The loop trips one invocation of the portable flash_cm2.comp makes per key tile
// (common/wg_matrix.glsl's loops: loads two words a trip, products 16 terms a trip, element
// operations a pair of elements a trip, row reductions), by which a device with a loop budget
// (DeviceCaps::max_loop_iterations: lavapipe stops a shader's loops past it, leaving wrong results)
// caps the key tiles of one dispatch (fused_keys_per_dispatch). Checked on Mesa 22.3 against the
// device's cut-off (docs/LAVAPIPE.md).
std::int64_t workgroup_matrix_loops_per_tile(const CoopmatLayout& t, std::uint32_t subgroup, std::uint32_t subgroups);

// Settles `t` and `subgroups` for flash_cm2.comp, where overrides.workgroup_matrices asks for it.
// Where the device offers flexible f16 workgroup matrices (DeviceCaps::workgroup_matrices), on the
// units: Br = 16·subgroups rows (tile_rows forces it: a workgroup of Br/16 subgroups), Bc = t.keys
// (64, or tile_keys), on a workgroup size the device offers them at; InvalidArgument naming
// variant.tile_rows where that size is not offered, and variant.workgroup_matrices where a matrix
// passes the device's dimension. Elsewhere the portable implementation (common/wg_matrix.glsl; the
// kernel's logic on any device, a fallback far from the units' speed): 16 rows on one subgroup
// unless tile_rows, Bc 64 halved to as little as 16 until its shared memory fits unless tile_keys.
// Both: Q and K in dk_tiles, O's columns in passes of up to 128; K and V read by tensor loads where
// `kv_tensor_loads` (dense rows of the operands' type whose strides allow them: kv_tensor_loads),
// else staged (t.staged); bf16 operands where q, k or v is stored as bf16, checked against the
// device's bf16 granularities; InvalidArgument naming variant.workgroup_matrices where the driver's
// matrices take f16 alone (DeviceCaps::workgroup_bf16_matrices) and the operands are bf16, or Dk
// passes 128; the knob that shaped it where shared memory does not hold it; and naming
// row_tiles, q_in_shared, kv_apart or named_accumulators where they are set beside it (the kernel
// has no such forms). The first element's alignment under tensor loads is the run's to check
// (attention/fused.cpp: require_tensor_loads_aligned), which knows the descriptors.
void choose_workgroup_matrices(CoopmatLayout& t, const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                               const Problem& problem, const VariantOverrides& overrides, bool kv_tensor_loads);

// Whether flash_cm2.comp may read K and V of `p` by tensor loads: stored as its operands' type
// (coopmat_operand_type: bf16 where q, k or v is bf16, else f16), not paged, their
// strides (`k_strides`, `v_strides`, elements) as tensor_loads_aligned asks. Else it stages them.
bool kv_tensor_loads(const Problem& p, const std::array<std::int64_t, 4>& k_strides, const std::array<std::int64_t, 4>& v_strides);

// InvalidArgument naming variant.workgroup_matrices where it is asked for (`workgroup` true) without
// the cooperative-matrix kernel it shapes (`coopmat`: `knob`, fused_kernel or gemm_kernel, = coopmat).
void refuse_workgroup_without_coopmat(const std::optional<bool>& workgroup, bool coopmat, const char* knob);

// Whether a tensor of 16-bit elements (f16, bf16), rows of `row_length`, may be read by tensor
// loads: unit-stride rows, and every stride and the first element's offset a multiple of 8
// elements, so that every tile's first element lies on 16 bytes (GL_NV_cooperative_matrix2 requires
// it of a load's offset); and rows at least their length apart (a tensor layout's stride must be:
// rows that overlap, such as a broadcast's stride of 0, are not a layout's).
bool tensor_loads_aligned(const TensorDesc& desc, std::int64_t row_length);
// The strides' part of it (the first element's offset aside).
bool strides_allow_tensor_loads(const std::array<std::int64_t, 4>& strides, std::int64_t row_length);
// InvalidArgument naming variant.workgroup_matrices where `desc` (operand `what`) is not.
void require_tensor_loads_aligned(const TensorDesc& desc, std::int64_t row_length, const char* what);

// bwd_cm2_q.comp's and bwd_cm2_kv.comp's shared memory with layout `t` (workgroup_matrices set) and
// `subgroups`, the larger: per row (dQ) its facts (9 words) and RowMask (11), or per query of a tile
// (dK/dV) its terms (4) and RowMask; 4 words of key range. The portable implementation
// (common/wg_matrix.glsl) adds each kernel's operands as f16 pairs: dQ's Q, dO, Kᵀ, Vᵀ, dS and K;
// dK/dV's K, V, Qᵀ, dOᵀ, W, dS, dO and Q.
std::uint32_t workgroup_backward_shared_bytes(const CoopmatBackwardLayout& t, std::uint32_t subgroups);

// The portable backward's loop trips per key tile (dQ) and per query tile (dK/dV), as
// workgroup_matrix_loops_per_tile counts the forward's.
std::int64_t workgroup_backward_loops_per_key_tile(const CoopmatBackwardLayout& t, std::uint32_t subgroup, std::uint32_t subgroups);
std::int64_t workgroup_backward_loops_per_query_tile(const CoopmatBackwardLayout& t, std::uint32_t subgroup, std::uint32_t subgroups);

// Settles `t` (its tiles counted) and `subgroups` for the backward on workgroup matrices. On the
// units (DeviceCaps::workgroup_matrices): 4 subgroups of 16 rows (keys), 64-wide tiles of the other
// side; InvalidArgument naming variant.workgroup_matrices where the workgroup size or a matrix is one
// the device does not take. Elsewhere the portable implementation: one subgroup of 16, tiles of 64
// halved to as little as 16 until shared memory holds them. Both: bf16 operands where q, k and v
// are bf16 (the device's bf16 granularities on the units); InvalidArgument naming
// variant.workgroup_matrices where q, k and v are not all f16 or all bf16, bf16 meets units that take
// f16 alone (DeviceCaps::workgroup_bf16_matrices), a head passes 128, or shared memory is short.
// The tensors' alignment is the run's to check (require_tensor_loads_aligned, attention/backward.cpp).
void choose_workgroup_backward(CoopmatBackwardLayout& t, const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                               const Problem& problem);

// The workgroup size at which shaders/cm2_probe.comp (64 × 64 matrices, row values in 16 columns)
// runs on the device's matrices: the smallest whose granularity takes them; 0 where none does, where
// its staged tile (kWorkgroupProbeSharedBytes) does not fit beside the driver's reserve, or where
// the device has none (DeviceCaps::workgroup_matrices).
inline constexpr std::uint32_t kWorkgroupProbeSharedBytes = 64 * (64 + 8) * 2;  // cm2_probe.comp's x_tile
std::uint32_t workgroup_probe_invocations(const vk::DeviceCaps& caps);
// Turns the cooperative-matrix GEMM `c` (its shape chosen) into bmm_cm2.comp's, the GEMM ceiling on
// workgroup matrices, for products K deep: InvalidArgument naming variant.workgroup_matrices where
// the shape's workgroup (subgroups · subgroup invocations) or tile (BM, BN, BK) is one the device's
// matrices do not take. Where the device offers none, the portable twin (common/wg_matrix.glsl):
// refused by name where its workgroup or A's and B's slices (f16 pairs in shared memory) do not fit,
// and ResourceLimit naming k where its loop trips (workgroup_gemm_loops) pass a loop budget.
void choose_workgroup_gemm(BmmConfig& c, const vk::DeviceCaps& caps, std::int64_t k);

// The portable bmm_cm2.comp's loop trips per invocation over a product K deep: C's fill and store,
// and per BK slice A's and B's words (two a trip) and the products (16 terms a trip).
std::int64_t workgroup_gemm_loops(const BmmConfig& c, std::int64_t k);

// bmm_cm2.comp's refusals of a product it cannot run: Aᵀ·B, and A or B stored as other than f16.
void check_workgroup_gemm(BmmForm form, DType a, DType b);

}  // namespace vkattn::detail

// The backward kernels on cooperative matrices (shaders/flash_bwd_q_coopmat.comp,
// flash_bwd_kv_coopmat.comp; issue #33): flash_bwd_q.comp's and flash_bwd_kv.comp's contracts with
// their products on common/coopmat.glsl. A workgroup owns 16 query rows (dQ) or 16 keys (dK, dV) per
// subgroup, their operands in registers and their gradients as accumulators; the other side's rows
// pass through one operand tile (f16 or bf16) in shared memory, the scores through the subgroup's own. Pure (no Vulkan).
#pragma once

#include <cstdint>
#include <string>

#include "attention/problem.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

struct CoopmatBackwardLayout {
    std::uint32_t tile = 64;         // keys per tile (dQ) and queries per tile (dK, dV): a multiple of 16
    std::uint32_t dk_tiles = 8;      // ceil(Dk / 16)
    std::uint32_t dv_tiles = 8;      // ceil(Dv / 16)
    std::uint32_t column_tiles = 8;  // the gradients' 16-column tiles per pass (at most 8)
    bool units = false;              // on the matrix units (16-bit operands in shared memory), else portable
    DType operands = DType::f16;     // what the products multiply: f16, or bf16 (coopmat_operands)
    // bwd_cm2_q.comp and bwd_cm2_kv.comp instead: the same work on workgroup-scope matrices
    // (VariantOverrides::workgroup_matrices; choose_workgroup_backward, attention/workgroup_matrices.hpp).
    bool workgroup_matrices = false;
    std::uint32_t columns() const { return 16 * column_tiles; }
    // The larger of the two kernels' shared memory: the other side's tile [max(tile, 16·subgroups)]
    // [16·max(dk_tiles, dv_tiles) + 8] and, per subgroup, two fp32 score tiles [16][tile + 4] and one
    // (dQ) or two (dK, dV) operand tiles [16][tile + 8]; the dK/dV kernel's per-query terms (16 bytes
    // a query of its tile; more than the dQ kernel's key range, 8 bytes).
    std::uint32_t shared_bytes(std::uint32_t subgroups) const;
    std::string describe() const;
};

// The layout for subgroups of `subgroup` lanes: 4 subgroups and 64-wide tiles where shared memory
// allows, then 32-wide, fewer subgroups, 16-wide; passes of up to 128 gradient columns. Returns the
// subgroups through `subgroups`. Throws InvalidArgument("variant.fused_kernel") as coopmat_operands
// does, and where even the smallest tiles do not fit. `workgroup`: on workgroup-scope matrices,
// as choose_workgroup_backward settles it.
CoopmatBackwardLayout choose_coopmat_backward(const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                                              const Problem& problem, bool workgroup = false);

// Loop back-edges of one key tile of the dQ kernel, and of one query tile of the dK/dV kernel (lavapipe
// counts them; the portable implementation's products loop over their slots).
std::int64_t coopmat_backward_loops_per_key_tile(const CoopmatBackwardLayout& layout, std::uint32_t subgroup,
                                                 std::uint32_t subgroups);
std::int64_t coopmat_backward_loops_per_query_tile(const CoopmatBackwardLayout& layout, std::uint32_t subgroup,
                                                   std::uint32_t subgroups);

}  // namespace vkattn::detail

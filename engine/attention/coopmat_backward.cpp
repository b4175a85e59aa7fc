#include "attention/coopmat_backward.hpp"

#include <algorithm>

#include "attention/ceil_div.hpp"
#include "attention/coopmat_tile.hpp"
#include "attention/workgroup_matrices.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {

std::uint32_t CoopmatBackwardLayout::shared_bytes(std::uint32_t subgroups) const {
    if (workgroup_matrices) return workgroup_backward_shared_bytes(*this, subgroups);
    const std::uint32_t operand = coopmat_operand_bytes(units);
    const std::uint32_t rows = std::max(tile, 16 * subgroups), pitch = 16 * std::max(dk_tiles, dv_tiles) + 8;
    // The dK/dV kernel's two operand tiles per subgroup and its query tile's terms (lse, Δ and the
    // row mask's key range: 16 bytes a query) are the larger need: the dQ kernel has one operand tile
    // per subgroup and, for the terms, only its key range's 8 bytes.
    return operand * rows * pitch + subgroups * 16 * (2 * 4 * (tile + 4) + 2 * operand * (tile + 8)) + 16 * tile;
}

std::string CoopmatBackwardLayout::describe() const {
    return "tile" + std::to_string(tile) + " dkt" + std::to_string(dk_tiles) + " dvt" + std::to_string(dv_tiles) + " ot" +
           std::to_string(column_tiles) + (units ? " units" : " portable") + (operands == DType::bf16 ? " bf16" : "") +
           (workgroup_matrices ? " workgroup" : "");
}

CoopmatBackwardLayout choose_coopmat_backward(const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                                              const Problem& p, bool workgroup) {
    CoopmatBackwardLayout t;
    if (workgroup) {  // its own rules, each refusal naming variant.workgroup_matrices
        choose_workgroup_backward(t, caps, subgroup, subgroups, p);
        return t;
    }
    refuse_wide_heads_on_units(caps, p, "the cooperative-matrix backward", "the default kernels");
    t.units = caps.matrix_units;
    t.operands = coopmat_operands(caps, {p.dtype, p.k_dtype, p.v_dtype}, "variant.fused_kernel", "the cooperative-matrix backward",
                                  "the default kernels");
    t.dk_tiles = static_cast<std::uint32_t>(ceil_div(std::max<std::int64_t>(p.Dk, 1), 16));
    t.dv_tiles = static_cast<std::uint32_t>(ceil_div(std::max<std::int64_t>(p.Dv, 1), 16));
    t.column_tiles = std::min<std::uint32_t>(8, std::max(t.dk_tiles, t.dv_tiles));
    subgroups = std::max<std::uint32_t>(1, std::min(4u, caps.max_workgroup_invocations / subgroup));
    auto fits = [&] { return t.shared_bytes(subgroups) <= caps.max_shared_bytes; };
    while (!fits()) {
        if (t.tile > 32) t.tile /= 2;
        else if (subgroups > 1) subgroups /= 2;
        else if (t.tile > 16) t.tile /= 2;
        else break;
    }
    if (!fits())
        throw InvalidArgument("variant.fused_kernel", "the cooperative-matrix backward at Dk = " + std::to_string(p.Dk) +
                                                          ", Dv = " + std::to_string(p.Dv) + " needs " +
                                                          std::to_string(t.shared_bytes(subgroups)) +
                                                          " bytes of shared memory at its smallest tiles; the device has " +
                                                          std::to_string(caps.max_shared_bytes) + ".");
    return t;
}

namespace {
// Trips of a staging loop, and of the products over `tiles` 16-wide tiles of the other side, each
// against `inner` operand tiles (the portable products loop over 256 / SG slots).
std::int64_t products(std::int64_t tiles, std::int64_t inner, std::uint32_t subgroup) {
    return tiles * (1 + inner * (1 + std::max<std::int64_t>(1, 256 / subgroup)));
}
}  // namespace

std::int64_t coopmat_backward_loops_per_key_tile(const CoopmatBackwardLayout& t, std::uint32_t subgroup, std::uint32_t subgroups) {
    if (t.workgroup_matrices) return workgroup_backward_loops_per_key_tile(t, subgroup, subgroups);
    const std::int64_t lanes = std::int64_t{subgroup} * subgroups, tiles = t.tile / 16;
    const std::int64_t stage = ceil_div(t.tile * 16 * t.dv_tiles / 8, lanes) + ceil_div(t.tile * 16 * t.dk_tiles / 8, lanes);
    const std::int64_t elementwise = std::max<std::int64_t>(1, 16 / subgroup) * t.tile / std::max<std::uint32_t>(1, subgroup / 16);
    return 4 + stage + products(tiles, t.dv_tiles, subgroup) + products(tiles, t.dk_tiles, subgroup) + elementwise +
           products(tiles, t.column_tiles, subgroup);
}

std::int64_t coopmat_backward_loops_per_query_tile(const CoopmatBackwardLayout& t, std::uint32_t subgroup,
                                                   std::uint32_t subgroups) {
    if (t.workgroup_matrices) return workgroup_backward_loops_per_query_tile(t, subgroup, subgroups);
    const std::int64_t lanes = std::int64_t{subgroup} * subgroups, tiles = t.tile / 16;
    // Q (twice) and dO, and the tile's per-query terms.
    const std::int64_t stage = 2 * ceil_div(t.tile * 16 * t.dk_tiles / 4, lanes) + ceil_div(t.tile * 16 * t.dv_tiles / 4, lanes) +
                               ceil_div(t.tile, lanes);
    const std::int64_t elementwise = t.tile / std::max<std::uint32_t>(1, subgroup / 16);
    return 4 + stage + products(tiles, t.dk_tiles, subgroup) + products(tiles, t.dv_tiles, subgroup) + elementwise +
           2 * products(tiles, t.column_tiles, subgroup);
}

}  // namespace vkattn::detail

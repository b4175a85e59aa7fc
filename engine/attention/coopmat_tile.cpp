#include "attention/coopmat_tile.hpp"

#include <algorithm>

#include "attention/ceil_div.hpp"
#include "attention/device_rules.hpp"
#include "attention/tuning.hpp"
#include "attention/workgroup_matrices.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {

std::uint32_t CoopmatLayout::shared_bytes(std::uint32_t subgroups) const {
    if (workgroup_matrices) return workgroup_matrix_shared_bytes(*this, subgroups);
    const std::uint32_t operand = coopmat_operand_bytes(units);
    const std::uint32_t kv_pitch = (kv_apart ? 16 * dk_tiles : std::max(16 * dk_tiles, columns())) + 8;
    const std::uint32_t v_elements = kv_apart ? keys * (columns() + 8) : 8;
    const std::uint32_t q_elements = q_in_shared ? rows(subgroups) * (16 * dk_tiles + 8) : 8;
    return operand * (keys * kv_pitch + v_elements + q_elements) + rows(subgroups) * (4 * (keys + 4) + operand * (keys + 8)) + 8;
}

bool CoopmatLayout::staged_ahead() const { return dk_tiles <= 6 && column_tiles <= 6; }

bool CoopmatLayout::ahead_with(bool wide_loads) const { return staged_ahead() && (wide_loads || dk_tiles + column_tiles <= 8); }

bool CoopmatLayout::named_by_default() const {
    return q_in_shared ? column_tiles * row_tiles <= 8 : column_tiles <= 8 && dk_tiles + column_tiles <= 15;
}

std::string CoopmatLayout::describe() const {
    return "keys" + std::to_string(keys) + " dkt" + std::to_string(dk_tiles) + " ot" + std::to_string(column_tiles) +
           (row_tiles > 1 ? " rt" + std::to_string(row_tiles) : "") + (q_in_shared ? " qshared" : "") + (kv_apart ? " kv-apart" : "") + (workgroup_matrices ? " workgroup" : "") +
           (named ? " named" : "") + (ahead ? " ahead" : "") + (units ? " units" : " portable") + (staged ? " staged" : "") +
           (stat_columns != 16 ? " rw" + std::to_string(stat_columns) : "") + (operands == DType::bf16 ? " bf16" : "");
}

CoopmatLayout choose_coopmat_layout(const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                                    const Problem& p, const VariantOverrides& overrides, bool kv_tensor_loads) {
    CoopmatLayout t;
    t.units = caps.matrix_units;
    t.operands = coopmat_operands(caps, {p.dtype, p.k_dtype, p.v_dtype}, "variant.fused_kernel", "the cooperative-matrix kernel",
                                  "the tile kernel");
    t.dk_tiles = static_cast<std::uint32_t>(ceil_div(std::max<std::int64_t>(p.Dk, 1), 16));
    if (overrides.workgroup_matrices.value_or(false)) {
        choose_workgroup_matrices(t, caps, subgroup, subgroups, p, overrides, kv_tensor_loads);
        return t;
    }
    if (overrides.row_tiles) {
        t.row_tiles = *overrides.row_tiles;
        if (t.row_tiles < 1 || t.row_tiles > 2)
            throw InvalidArgument("variant.row_tiles", std::to_string(t.row_tiles) +
                                                           " row tiles per subgroup; the cooperative-matrix kernel takes 1 or 2.");
    }
    t.q_in_shared = overrides.q_in_shared.value_or(t.row_tiles > 1);
    t.kv_apart = overrides.kv_apart.value_or(false);
    if (t.row_tiles > 1 && !t.q_in_shared)
        throw InvalidArgument("variant.q_in_shared", "two row tiles per subgroup read Q from shared memory; "
                                                     "held, their 2·dk_tiles operands beside O's 8 named accumulators would be the live state "
                                                     "that computed wrong on NVIDIA's driver (D 128, one row tile).");
    // O's accumulators, column_tiles · row_tiles, number 8 at most: wider heads take column passes.
    t.column_tiles = static_cast<std::uint32_t>(std::clamp<std::int64_t>(ceil_div(p.Dv, 16), 1, 8 / t.row_tiles));
    const std::uint32_t most_subgroups = std::max<std::uint32_t>(1, caps.max_workgroup_invocations / subgroup);
    const std::uint32_t subgroup_rows = t.rows(1);
    subgroups = std::max<std::uint32_t>(1, std::min({subgroups, 4u / t.row_tiles, most_subgroups}));
    if (overrides.tile_rows) {
        const std::uint32_t br = *overrides.tile_rows;
        if (br == 0 || br % subgroup_rows != 0 || br / subgroup_rows > most_subgroups)
            throw InvalidArgument("variant.tile_rows", std::to_string(br) + " query rows per workgroup; on subgroups of " +
                                                           std::to_string(subgroup) + " lanes the cooperative-matrix kernel takes a multiple of " +
                                                           std::to_string(subgroup_rows) + " up to " + std::to_string(subgroup_rows * most_subgroups) +
                                                           " (one subgroup per " + std::to_string(subgroup_rows) + " rows, the device's " +
                                                           std::to_string(caps.max_workgroup_invocations) + " invocations).");
        subgroups = br / subgroup_rows;
    }
    if (overrides.tile_keys) {
        const std::uint32_t bc = *overrides.tile_keys;
        if (bc == 0 || bc % 16 != 0 || bc > 256)
            throw InvalidArgument("variant.tile_keys", std::to_string(bc) + " keys per tile; the cooperative-matrix kernel takes a multiple of 16 up to 256.");
        t.keys = bc;
    }
    // Shrink to fit: 32-key tiles, then fewer subgroups, then 16-key tiles, then narrower passes.
    const std::uint32_t shared = caps.max_shared_bytes;
    auto fits = [&] { return t.shared_bytes(subgroups) <= shared; };
    while (!fits()) {
        if (!overrides.tile_keys && t.keys > 32) t.keys /= 2;
        else if (!overrides.tile_rows && subgroups > 1) subgroups /= 2;
        else if (!overrides.tile_keys && t.keys > 16) t.keys /= 2;
        else if (t.column_tiles > 1 && (t.kv_apart || t.column_tiles > t.dk_tiles)) t.column_tiles /= 2;  // V's own tile narrows too
        else break;
    }
    if (!fits()) {
        const std::string need = "a tile of " + std::to_string(t.rows(subgroups)) + " rows and " + std::to_string(t.keys) +
                                 " keys at Dk = " + std::to_string(p.Dk) + " needs " + std::to_string(t.shared_bytes(subgroups)) +
                                 " bytes of shared memory; the device has " + std::to_string(shared) + ".";
        throw InvalidArgument(overrides.tile_rows   ? "variant.tile_rows"
                              : overrides.tile_keys ? "variant.tile_keys"
                              : t.row_tiles > 1     ? "variant.row_tiles"
                              : t.q_in_shared       ? "variant.q_in_shared"
                              : t.kv_apart          ? "variant.kv_apart"
                                                    : "variant.fused_kernel",
                              "the cooperative-matrix kernel: " + need);
    }
    t.ahead = t.ahead_with(p.k_dtype == t.operands && p.v_dtype == t.operands && p.Dk % 8 == 0 && p.Dv % 8 == 0);
    t.named = overrides.named_accumulators.value_or(t.named_by_default());
    if (t.named && t.units && !t.named_by_default())
        throw InvalidArgument("variant.named_accumulators",
                              "O as named accumulators at " + std::to_string(t.dk_tiles) + " d-tiles and " + std::to_string(t.column_tiles) +
                                  " column tiles (Dk = " + std::to_string(p.Dk) + ", Dv = " + std::to_string(p.Dv) +
                                  "): on the matrix units the named form takes 15 of them at most (heads up to 112 wide); "
                                  "wider ones gave wrong results on NVIDIA's driver.");
    return t;
}

std::int64_t coopmat_loops_per_tile(const CoopmatLayout& t, std::uint32_t subgroup, std::uint32_t subgroups, const Problem&) {
    if (t.workgroup_matrices) return workgroup_matrix_loops_per_tile(t, subgroup, subgroups);
    // The portable products loop over each lane's accumulator slots (256 / SG of them), and over the
    // operands (common/coopmat.glsl's CM_LOOP); the softmax over each of a lane's rows' keys, twice
    // (the scores, then P in pairs). (Devices that count loops have no matrix units; the count is
    // the portable implementation's.)
    const std::int64_t lanes = std::int64_t{subgroup} * subgroups, slots = std::max<std::int64_t>(1, 256 / subgroup);
    const std::int64_t key_tiles = t.keys / 16, dk = 16 * t.dk_tiles, oc = t.columns();
    // The staging: K's and V's 8-element chunks, fetched and stored in loops of the larger's steps.
    const std::int64_t stage = 4 * ceil_div(t.keys * std::max(dk, oc) / 8, lanes);
    const std::int64_t products = t.row_tiles * (1 + slots);
    const std::int64_t scores = key_tiles * (1 + t.dk_tiles * products);
    const std::int64_t pv = key_tiles * (1 + t.column_tiles * products);
    // A lane's rows (flash_coopmat.comp's SROWS) times its keys of each (SKEYS), as the backward's
    // elementwise counts (coopmat_backward.cpp).
    const std::int64_t lane_keys = t.keys / std::max<std::uint32_t>(1, subgroup / 16);
    const std::int64_t softmax = t.row_tiles * std::max<std::int64_t>(1, 16 / subgroup) * (lane_keys + lane_keys / 2);
    return 4 + stage + scores + softmax + t.column_tiles * t.row_tiles + pv;
}

bool coopmat_by_default(const vk::DeviceCaps& caps, const Problem& p) {
    return caps.matrix_units && !caps.matrix_tile.parts() && !is_cpu(caps) && caps.maximal_reconvergence && p.dtype == DType::f16 &&
           p.k_dtype == DType::f16 && p.v_dtype == DType::f16;
}

DType coopmat_operands(const vk::DeviceCaps& caps, std::initializer_list<DType> stored, const std::string& argument,
                       const std::string& kernel, const std::string& instead) {
    const bool bf16 = coopmat_operand_type(stored) == DType::bf16;
    if (bf16 && std::find(stored.begin(), stored.end(), DType::f16) != stored.end())
        throw InvalidArgument(argument, kernel + " multiplies f16 or bf16 operands, one type for all, and these are stored "
                                                 "as both: use one of them, or " + instead + ".");
    if (bf16 && caps.matrix_units && !caps.bf16_matrix_units)
        throw InvalidArgument(argument, kernel + " would multiply bf16 storage on matrix units that do not take bf16 "
                                                 "here (DeviceInfo::bf16_matrix_units_off says why); rounded to f16, its "
                                                 "range would overflow past ±65,504: use " + instead + ".");
    return bf16 ? DType::bf16 : DType::f16;
}

DType coopmat_operand_type(std::initializer_list<DType> stored) {
    return std::find(stored.begin(), stored.end(), DType::bf16) != stored.end() ? DType::bf16 : DType::f16;
}

bool coopmat_parts(bool units, DType operands, vk::MatrixTile tile) { return units && operands != DType::bf16 && tile.parts(); }

void matrix_parts_subgroup(const vk::DeviceCaps& caps, std::initializer_list<DType> stored, bool workgroup, std::uint32_t& subgroup,
                           bool& require) {
    const vk::MatrixTile t = caps.matrix_tile;
    if (workgroup || !coopmat_parts(caps.matrix_units, coopmat_operand_type(stored), t) || !caps.subgroup_size_control ||
        t.n < caps.min_subgroup_size || t.n > caps.max_subgroup_size)
        return;
    subgroup = t.n;
    require = true;
}

std::string coopmat_build(bool units, DType operands, vk::MatrixTile tile) {
    return std::string("coopmat") + (units ? "_units" : "") + (coopmat_parts(units, operands, tile) ? "_parts" : "") +
           (operands == DType::bf16 ? "_bf16" : "");
}

void refuse_wide_heads_on_units(const vk::DeviceCaps& caps, const Problem& p, const std::string& kernel, const std::string& instead,
                                bool q_in_shared) {
    if (caps.matrix_units && (p.Dk > 128 || p.Dv > 128) && !q_in_shared)
        throw InvalidArgument("variant.fused_kernel", "on the matrix units " + kernel + " takes heads up to 128 wide (Dk = " +
                                                          std::to_string(p.Dk) + ", Dv = " + std::to_string(p.Dv) +
                                                          "): wider ones gave wrong results on NVIDIA's driver with Q held in "
                                                          "registers; use " + instead + " (or read Q from shared memory: q_in_shared "
                                                          "or two row tiles, unvalidated there).");
}

FusedConfig coopmat_config(FusedConfig c, const vk::DeviceCaps& caps, const Problem& p, const VariantOverrides& overrides,
                           bool kv_tensor_loads) {
    std::uint32_t subgroups = 4;
    matrix_parts_subgroup(caps, {p.dtype, p.k_dtype, p.v_dtype}, overrides.workgroup_matrices.value_or(false), c.subgroup,
                          c.require_subgroup);
    c.coopmat = choose_coopmat_layout(caps, c.subgroup, subgroups, p, overrides, kv_tensor_loads);
    // The workgroup-matrix kernel has its own rule (Dk up to 128, O in passes): the faults this
    // refusal keeps away were flash_coopmat.comp's.
    if (!c.coopmat->workgroup_matrices)
        refuse_wide_heads_on_units(caps, p, "the cooperative-matrix kernel", "the tile kernel", c.coopmat->q_in_shared);
    c.subgroups = subgroups;
    c.rows = 16;
    c.staged = false;
    c.texel = c.texel_words = false;  // storage buffers through the typed loaders
    c.column_passes = static_cast<std::uint32_t>(ceil_div(p.Dv, c.coopmat->columns()));
    return c;
}

}  // namespace vkattn::detail

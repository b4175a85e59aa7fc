#include "attention/tile.hpp"

#include "attention/ceil_div.hpp"
#include "attention/tuning.hpp"
#include "vkattn/errors.hpp"

#include <algorithm>
#include <bit>
#include <optional>

namespace vkattn::detail {

std::uint32_t TileLayout::shared_bytes(std::uint32_t subgroup, std::uint32_t subgroups) const {
    const std::uint32_t br = rows(subgroup, subgroups), bc = keys();
    // Q's and K's chunks have rows of 4 floats past their length (flash_tile.comp's PITCH_Q, PITCH_K).
    return 4 * (dims_per_chunk * (br + 4) + dims_per_chunk * (bc + 4) + bc * br + bc * v_chunk()) + 8;
}

std::string TileLayout::describe() const {
    return "tr" + std::to_string(rows_per_lane) + " tc" + std::to_string(keys_per_lane) + " kg" +
           std::to_string(key_groups) + " dc" + std::to_string(dims_per_chunk) + " oc" + std::to_string(columns);
}

TileLayout choose_tile_layout(const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                              const Problem& p, const VariantOverrides& overrides) {
    TileLayout t;
    // A 64-key tile as 8 key groups of 8 keys: a lane's step over d reads its 4 rows and 8 keys as 3
    // vec4s of shared memory for 32 FMAs (the FMA peak wants at most ~1 word per 4 FMAs).
    t.key_groups = std::min<std::uint32_t>(8, subgroup);
    t.keys_per_lane = 64 / t.key_groups;
    t.rows_per_lane = 4;
    t.dims_per_chunk = 32;
    const auto v_chunk = static_cast<std::int64_t>(t.v_chunk());
    t.columns = static_cast<std::uint32_t>(std::min<std::int64_t>(128 / v_chunk * v_chunk, ceil_div(p.Dv, v_chunk) * v_chunk));
    t.columns = std::max(t.columns, t.v_chunk());
    const std::uint32_t rows_per_subgroup = (subgroup / t.key_groups) * t.rows_per_lane;
    if (overrides.tile_keys) {  // TC of 4 or 8 keys per lane: S's micro-tile stays 4 × 4 or 4 × 8
        const std::uint32_t bc = *overrides.tile_keys;
        if (bc != 4 * t.key_groups && bc != 8 * t.key_groups)
            throw InvalidArgument("variant.tile_keys", std::to_string(bc) + " keys per tile; on subgroups of " +
                                                           std::to_string(subgroup) + " lanes the tile kernel takes " +
                                                           std::to_string(4 * t.key_groups) + " or " +
                                                           std::to_string(8 * t.key_groups) + ".");
        t.keys_per_lane = bc / t.key_groups;
    }
    if (overrides.tile_rows) {
        const std::uint32_t br = *overrides.tile_rows, most = caps.max_workgroup_invocations / subgroup * rows_per_subgroup;
        if (br == 0 || br % rows_per_subgroup != 0 || br > most)
            throw InvalidArgument("variant.tile_rows", std::to_string(br) + " query rows per workgroup; on subgroups of " +
                                                           std::to_string(subgroup) + " lanes the tile kernel takes a multiple of " +
                                                           std::to_string(rows_per_subgroup) + " up to " + std::to_string(most) +
                                                           " (the device's " + std::to_string(caps.max_workgroup_invocations) +
                                                           " invocations).");
        subgroups = br / rows_per_subgroup;
    } else {
        // 64 rows per workgroup where the device allows: Br × Bc = 64 × 64, 41 KiB of tiles.
        subgroups = std::max<std::uint32_t>(1, std::min(subgroups, std::max<std::uint32_t>(1, 64 / rows_per_subgroup)));
        while (subgroups > 1 && (subgroups * subgroup > caps.max_workgroup_invocations ||
                                 t.shared_bytes(subgroup, subgroups) > caps.max_shared_bytes))
            subgroups /= 2;
    }
    if (!overrides.tile_keys)
        while (t.keys_per_lane > 4 && t.shared_bytes(subgroup, subgroups) > caps.max_shared_bytes) t.keys_per_lane /= 2;
    while (t.dims_per_chunk > 4 && t.shared_bytes(subgroup, subgroups) > caps.max_shared_bytes) t.dims_per_chunk /= 2;
    if (overrides.tile_rows || overrides.tile_keys)
        if (const std::uint32_t bytes = t.shared_bytes(subgroup, subgroups); bytes > caps.max_shared_bytes)
            throw InvalidArgument(overrides.tile_rows ? "variant.tile_rows" : "variant.tile_keys",
                                  "a tile of " + std::to_string(t.rows(subgroup, subgroups)) + " rows and " +
                                      std::to_string(t.keys()) + " keys needs " + std::to_string(bytes) +
                                      " bytes of shared memory; the device has " + std::to_string(caps.max_shared_bytes) + ".");
    return t;
}

std::int64_t tile_loops_per_tile(const TileLayout& t, std::uint32_t subgroup, std::uint32_t subgroups, const Problem& p) {
    const std::int64_t lanes = std::int64_t{subgroup} * subgroups, br = t.rows(subgroup, subgroups), bc = t.keys();
    const std::int64_t chunks = ceil_div(p.Dk, t.dims_per_chunk), dc = t.dims_per_chunk, vc = t.v_chunk();
    const std::int64_t shuffles = std::bit_width(t.key_groups) - 1;
    const std::int64_t per_chunk = 1 + ceil_div(br * dc / 4, lanes) + ceil_div(bc * dc / 4, lanes) + dc;
    const std::int64_t softmax = t.rows_per_lane * (2 + shuffles + 3 * t.keys_per_lane);
    const std::int64_t pv = (t.columns / vc) * (1 + ceil_div(bc * vc / 4, lanes) + bc);
    return 4 + chunks * per_chunk + softmax + pv;
}

std::optional<FusedConfig> tile_config(FusedConfig c, const vk::DeviceCaps& caps, const Problem& p,
                                       const VariantOverrides& overrides, std::string* why) {
    std::uint32_t subgroups = 16;
    c.tile = choose_tile_layout(caps, c.subgroup, subgroups, p, overrides);
    if (const std::uint32_t bytes = c.tile->shared_bytes(c.subgroup, subgroups); bytes > caps.max_shared_bytes) {
        if (why) *why = "the tile kernel needs " + std::to_string(bytes) + " bytes of shared memory, more than the device's " +
                        std::to_string(caps.max_shared_bytes);
        return std::nullopt;
    }
    c.subgroups = subgroups;
    c.rows = c.tile->rows_per_lane;
    c.staged = false;
    c.texel = c.texel_words = false;  // storage buffers through the typed loaders
    c.column_passes = static_cast<std::uint32_t>((p.Dv + c.tile->columns - 1) / c.tile->columns);
    return c;
}

}  // namespace vkattn::detail

// The cooperative-matrix kernel's smallest layout (attention/coopmat_tile.hpp): one subgroup, 16-key
// tiles and one column tile (V's rows no wider than Q's, where K and V share a tile), what
// choose_coopmat_layout shrinks to before it refuses a layout by name. The tests' source for whether
// a device's shared memory can take a layout at all.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attention/coopmat_tile.hpp"

namespace vkattn::test {

inline detail::CoopmatLayout smallest_coopmat_layout(std::int64_t dk, bool units, std::uint32_t row_tiles = 1, bool kv_apart = false) {
    return {.keys = 16,
            .dk_tiles = static_cast<std::uint32_t>((std::max<std::int64_t>(dk, 1) + 15) / 16),
            .column_tiles = 1,
            .units = units,
            .row_tiles = row_tiles,
            .q_in_shared = row_tiles > 1,
            .kv_apart = kv_apart};
}

// Whether even the smallest layout fits `shared_bytes` of shared memory.
inline bool coopmat_fits(std::int64_t dk, bool units, std::uint32_t max_shared_bytes, std::uint32_t row_tiles = 1,
                         bool kv_apart = false) {
    return smallest_coopmat_layout(dk, units, row_tiles, kv_apart).shared_bytes(1) <= max_shared_bytes;
}

}  // namespace vkattn::test

// The GPU prefill kernel's layout (shaders/flash_tile.comp, issue #32; the cost model is
// docs/design/GPU_KERNELS.md "Prefill"): FlashAttention-2's partition on the FP32 units. A workgroup
// owns Br query rows; each lane a TR × TC micro-tile of the scores and the O of its TR rows for 4
// columns of every V chunk; Q, K, P and V pass through fp32 tiles in shared memory. Pure (no Vulkan).
#pragma once

#include <cstdint>
#include <string>

#include "attention/problem.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

struct TileLayout {
    std::uint32_t rows_per_lane = 4;   // TR (a multiple of 4)
    std::uint32_t keys_per_lane = 8;   // TC (a multiple of 4)
    std::uint32_t key_groups = 8;      // KG: lanes sharing a row group (a power of two, ≤ the subgroup)
    std::uint32_t dims_per_chunk = 32; // DC: Q and K dimensions per shared-memory chunk
    std::uint32_t columns = 128;       // OC: output columns per pass, a multiple of 4·KG
    // Rows per workgroup (Br), keys per tile (Bc), V columns per chunk (VC = 4·KG).
    std::uint32_t rows(std::uint32_t subgroup, std::uint32_t subgroups) const {
        return subgroups * (subgroup / key_groups) * rows_per_lane;
    }
    std::uint32_t keys() const { return key_groups * keys_per_lane; }
    std::uint32_t v_chunk() const { return 4 * key_groups; }
    // flash_tile.comp's shared memory: Q [DC][Br + 4], K [DC][Bc + 4] (rows padded against bank
    // conflicts), P [Bc][Br], V [Bc][VC] as fp32, and the workgroup's key range.
    std::uint32_t shared_bytes(std::uint32_t subgroup, std::uint32_t subgroups) const;
    std::string describe() const;
};

// The layout for subgroups of `subgroup` lanes: 8 key groups of 8 keys (64-key tiles), 4 rows per
// lane, and as many subgroups as make 64 rows (fewer where the device's invocations or shared memory
// are short); columns per pass: Dv rounded up to a V chunk, at most 128 (O stays at 64 registers).
// Returns the subgroups through `subgroups` (the caller's count is the upper bound, except for a
// forced tile_rows). overrides.tile_rows and tile_keys force Br and Bc (InvalidArgument naming them
// where the device cannot take them; only Q and K's chunk of dimensions then shrinks to fit).
TileLayout choose_tile_layout(const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                              const Problem& problem, const VariantOverrides& overrides = {});

// Loop back-edges one key tile of flash_tile.comp may take (lavapipe counts them).
std::int64_t tile_loops_per_tile(const TileLayout& layout, std::uint32_t subgroup, std::uint32_t subgroups,
                                 const Problem& problem);

}  // namespace vkattn::detail

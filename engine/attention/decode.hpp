// The GPU decode kernel's layout (shaders/flash_decode.comp, issue #31; the cost model is
// docs/design/GPU_KERNELS.md "Decode"): split-KV whose workgroups hold a K/V head's query rows in
// every subgroup, several lanes per key, each lane loading 16-byte chunks of the key's row. Pure
// (no Vulkan), so tests drive it with made-up devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attention/params.hpp"
#include "attention/problem.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

struct DecodeLayout {
    std::uint32_t lanes_per_key = 8;  // LPK: lanes sharing one key (a power of two, ≤ the subgroup)
    std::uint32_t keys_per_lane = 2;  // KPL: keys per key slot per step, all fetched before use
    std::uint32_t k_chunks = 2;       // TK: K chunks per lane, ceil(Dk / (LPK · chunk))
    std::uint32_t v_chunks = 2;       // TV: V chunks per lane
    std::string describe() const;
};

// Elements per chunk of a storage type: 16 bytes of f32, f16, bf16 and fp8; half a ggml block
// (common/chunk_load.glsl's CHUNK_ELEMENTS).
std::uint32_t decode_chunk_elements(DType t);

// The layout for `rows` query rows per workgroup on subgroups of `subgroup` lanes: lanes per key so
// that each lane holds about 16 elements of a row (8 with more than 4 rows, so that Q and O stay
// near 64 registers each per lane), and the chunks that covers.
// `lanes_per_key` forces LPK (VariantOverrides::decode_lanes_per_key; InvalidArgument naming it where
// it is no power of two up to the subgroup).
DecodeLayout choose_decode_layout(std::uint32_t subgroup, std::uint32_t rows, const Problem& problem,
                                  std::optional<std::uint32_t> lanes_per_key = std::nullopt);

// Keys one workgroup step covers: subgroups · (subgroup / LPK) key slots · KPL.
std::uint32_t decode_step_keys(const DecodeLayout& layout, std::uint32_t subgroup, std::uint32_t subgroups);

// flash_decode.comp's shared memory: one row's O chunks and (m, l) of every subgroup.
std::uint32_t decode_shared_bytes(const DecodeLayout& layout, std::uint32_t subgroups, DType v);

// Loop back-edges one step of flash_decode.comp may take on a device that counts them (lavapipe),
// counting every inner loop as if the compiler kept it (it unrolls them where it can).
std::int64_t decode_loops_per_step(const DecodeLayout& layout, std::uint32_t rows, const Problem& problem);

// Whether every row of a dense operand (t's desc as bound) starts on 16 bytes and holds whole
// chunks, so that flash_decode.comp loads a chunk as one uvec4 (block types: always, they load
// words); flash_coopmat.comp's WIDE loads of f16 K/V ask the same of their 8-element chunks.
// `row_length` is Dk or Dv.
bool decode_wide_rows(const TensorDesc& desc, DType t, std::int64_t row_length);
// The same for a paged pool's rows: (block·block_units + r·row_units)·D + head·stride.y + origin.w
// from a binding at `pool_offset` bytes.
bool decode_wide_pool(const TensorDesc& desc, const PagedKv& paged, DType t, std::uint64_t pool_offset);

}  // namespace vkattn::detail

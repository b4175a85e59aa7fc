#include "attention/decode.hpp"

#include "attention/ceil_div.hpp"
#include "attention/tuning.hpp"
#include "vkattn/errors.hpp"
#include "types/narrow.hpp"

#include <algorithm>
#include <bit>
#include <optional>

namespace vkattn::detail {
namespace {
// 4-element vec4s per chunk.
std::uint32_t chunk4(DType t) { return decode_chunk_elements(t) / 4; }
}  // namespace

std::string DecodeLayout::describe() const {
    return "lanes/key" + std::to_string(lanes_per_key) + " keys/lane" + std::to_string(keys_per_lane) + " k" +
           std::to_string(k_chunks) + " v" + std::to_string(v_chunks);
}

std::uint32_t decode_chunk_elements(DType t) {
    if (t == DType::f32) return 4;
    if (t == DType::f16 || t == DType::bf16) return 8;
    return 16;  // fp8's 16 bytes, half of a ggml block
}

DecodeLayout choose_decode_layout(std::uint32_t subgroup, std::uint32_t rows, const Problem& p,
                                  std::optional<std::uint32_t> lanes_per_key) {
    DecodeLayout d;
    // Per lane: Q and O hold rows × elements floats each (docs/design/GPU_KERNELS.md: 4 rows × 16
    // = 64 registers apiece, so that 4 workgroups of 128 fit an SM's 64K registers).
    const std::int64_t per_lane = rows > 4 ? 8 : 16;
    const std::int64_t widest = std::max(p.Dk, p.Dv);
    const auto wanted = std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(1, (widest + per_lane - 1) / per_lane)));
    d.lanes_per_key = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(wanted, 1, subgroup));
    if (lanes_per_key) {
        if (!std::has_single_bit(*lanes_per_key) || *lanes_per_key > subgroup)
            throw InvalidArgument("variant.decode_lanes_per_key",
                                  std::to_string(*lanes_per_key) + " lanes per key; the decode kernel takes a power of two up to "
                                  "the subgroup's " + std::to_string(subgroup) + " lanes.");
        d.lanes_per_key = *lanes_per_key;
    }
    // Two keys per key slot: with D = 128 f16, 4 uvec4 loads of K and V per key, 8 in flight per lane
    // (128 bytes; 16 KiB per workgroup of 128).
    d.keys_per_lane = 2;
    d.k_chunks = u32(ceil_div(p.Dk, std::int64_t{d.lanes_per_key} * decode_chunk_elements(p.k_dtype)));
    d.v_chunks = u32(ceil_div(p.Dv, std::int64_t{d.lanes_per_key} * decode_chunk_elements(p.v_dtype)));
    return d;
}

std::uint32_t decode_step_keys(const DecodeLayout& d, std::uint32_t subgroup, std::uint32_t subgroups) {
    return subgroups * (subgroup / d.lanes_per_key) * d.keys_per_lane;
}

std::uint32_t decode_shared_bytes(const DecodeLayout& d, std::uint32_t subgroups, DType v) {
    return subgroups * d.lanes_per_key * d.v_chunks * chunk4(v) * 16 + subgroups * 8;
}

std::int64_t decode_loops_per_step(const DecodeLayout& d, std::uint32_t rows, const Problem& p) {
    const std::int64_t kpl = d.keys_per_lane, ck4 = chunk4(p.k_dtype), cv4 = chunk4(p.v_dtype);
    const std::int64_t shuffles = std::bit_width(d.lanes_per_key) - 1;
    // The fetches (a chunk's words: up to 16 one by one), the scores and their reduction, then per
    // row the mask, the rescale and P·V.
    const std::int64_t fetch = kpl * (1 + (d.k_chunks + d.v_chunks) * 17);
    const std::int64_t scores = kpl * rows * (1 + d.k_chunks * ck4 + shuffles);
    const std::int64_t softmax = rows * (2 + kpl + d.v_chunks * cv4 + kpl * d.v_chunks * cv4);
    return 2 + fetch + scores + softmax;
}

bool decode_wide_rows(const TensorDesc& desc, DType t, std::int64_t row_length) {
    if (is_block_type(t)) return true;
    const std::uint32_t c = decode_chunk_elements(t);
    return desc.stride[3] == 1 && row_length % c == 0 && desc.stride[0] % c == 0 && desc.stride[1] % c == 0 &&
           desc.stride[2] % c == 0 && desc.origin[3] % c == 0;
}

bool decode_wide_pool(const TensorDesc& desc, const PagedKv& paged, DType t, std::uint64_t pool_offset) {
    if (is_block_type(t)) return true;
    const std::uint32_t c = decode_chunk_elements(t);
    const std::uint64_t row = desc.stride[3];  // D: pools hold whole rows
    return pool_offset % 16 == 0 && row % c == 0 && (paged.block_units * row) % c == 0 &&
           (paged.row_units * row) % c == 0 && desc.stride[1] % c == 0 && desc.origin[3] % c == 0;
}

std::optional<FusedConfig> decode_config(FusedConfig c, const vk::DeviceCaps& caps, const Problem& p,
                                         const VariantOverrides& overrides, std::string* why) {
    // Four subgroups: a step of D = 128 f16 then keeps 16 KiB of loads in flight per workgroup, and
    // 4 workgroups per SM hold the ~22 KB an H200 needs in flight (docs/design/GPU_KERNELS.md).
    c.subgroups = 4;
    while (c.subgroups * c.subgroup > caps.max_workgroup_invocations && c.subgroups > 1) c.subgroups /= 2;
    // Every subgroup holds all of a unit's rows, up to 8 (more take several row blocks, each reading
    // the keys again).
    c.rows = static_cast<std::uint32_t>(std::min<std::uint64_t>(8, std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(1, p.group * p.Nq)))));
    c.staged = false;
    c.texel = c.texel_words = false;  // storage buffers: 16-byte loads where rows allow
    c.column_passes = 1;              // a lane's O chunks cover Dv
    c.decode = choose_decode_layout(c.subgroup, c.rows, p, overrides.decode_lanes_per_key);
    while (decode_shared_bytes(*c.decode, c.subgroups, p.v_dtype) > caps.max_shared_bytes && c.subgroups > 1) c.subgroups /= 2;
    if (decode_shared_bytes(*c.decode, c.subgroups, p.v_dtype) > caps.max_shared_bytes) {
        if (why) *why = "the decode kernel needs " + std::to_string(decode_shared_bytes(*c.decode, 1, p.v_dtype)) +
                        " bytes of shared memory, more than the device's " + std::to_string(caps.max_shared_bytes);
        return std::nullopt;
    }
    return c;
}

}  // namespace vkattn::detail

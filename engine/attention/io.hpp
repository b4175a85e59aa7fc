// Where a request's tensors lie on the device, as every path sees them: each tensor's strides, its
// first element's index in its buffer and the buffer's size (planning needs only these), then the
// buffers themselves (recording needs those too).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

#include "attention/params.hpp"
#include "attention/problem.hpp"
#include "attention/slicing.hpp"
#include "vk/buffer.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

// How one tensor lies in the buffer a path binds: element (b, h, n, f) is element
// base + b·s0 + h·s1 + n·s2 + f·s3 of the buffer.
struct Operand {
    std::array<std::int64_t, 4> strides{};
    std::int64_t base = 0;
    std::uint64_t buffer_bytes = 0;  // how far a binding may reach
    // A packed (varlen) tensor: strides[0] is 0 and a batch's rows start where cu_seqlens says, on
    // the device only, so every slice covers all `packed_rows` rows of the heads it holds.
    std::int64_t packed_rows = 0;

    // This tensor packed (varlen): batch stride 0, every one of its `rows` rows in each slice.
    Operand packed(std::int64_t rows) const {
        Operand op = *this;
        op.strides[0] = 0;
        op.packed_rows = rows;
        return op;
    }

    Slice slice(std::int64_t row_length, const Box& box, Unit unit, std::uint64_t alignment) const {
        return slice(Features{0, row_length}, box, unit, alignment, Indexing::absolute);
    }
    Slice slice(Features features, const Box& box, Unit unit, std::uint64_t alignment,
                Indexing indexing) const {
        Box rows = box;
        if (packed_rows > 0) {
            rows.b0 = rows.b1 = 0;
            rows.n0 = 0;
            rows.n1 = packed_rows - 1;
        }
        return slice_of(strides, features, rows, unit, alignment, buffer_bytes, indexing, base);
    }
};

// A paged K/V (flash.comp's PAGED variants): each pool bound whole, from its first block.
struct PagedOperands {
    PagedKv addressing;               // block size, table stride, blocks per pool, blocks
    std::uint32_t pools = 1;
    TensorDesc k, v;                  // elements between blocks (x), heads (y), rows (z); D (w)
    std::uint64_t k_pool_bytes = 0, v_pool_bytes = 0;  // the largest pool's binding
};
PagedOperands paged_operands(const PagedSpec& spec, const Problem& problem);

// q, k, v, o as the views say (k and v unused when paged); lse [B, Hq, Nq], weights and logits
// [B, Hq, Nq, Nkv] dense fp32; the masks with their broadcast strides (Problem::bool_mask /
// float_mask).
struct Operands {
    Operand q, k, v, o, lse, weights, logits, bool_mask, float_mask;
    std::optional<PagedOperands> paged;
};

// The operands of tensors each alone in a buffer of its own (base 0), as the engine allocates them:
// the span rounded up to 16 bytes plus 16 bytes of slack (tensor/storage.hpp).
Operands own_buffer_operands(const Problem& problem, const std::array<std::int64_t, 4>& q_strides,
                             const std::array<std::int64_t, 4>& k_strides, const std::array<std::int64_t, 4>& v_strides,
                             const std::array<std::int64_t, 4>& o_strides);

// The buffers a path binds besides its own scratch.
struct DeviceBuffers {
    const vk::Buffer *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr, *weights = nullptr,
                     *logits = nullptr;
    const vk::Buffer *lengths = nullptr, *bool_mask = nullptr, *float_mask = nullptr;
    const vk::Buffer* head_terms = nullptr;  // head_terms_of(): slopes, sinks, fp8 scales (mask.glsl)
    Slice lengths_slice;                     // [B] int32 key lengths (a placeholder when absent)
    std::uint64_t head_terms_bytes = 16;
    // Paged: the pools (k and v unused) and the block table, each bound whole.
    std::array<const vk::Buffer*, 4> k_pools{}, v_pools{};
    std::array<std::uint64_t, 4> k_pool_offsets{}, v_pool_offsets{};
    const vk::Buffer* block_table = nullptr;
    Slice table_slice;
    // Varlen: cu_seqlens_q and cu_seqlens_k (a placeholder where absent).
    const vk::Buffer *cu_q = nullptr, *cu_k = nullptr;
    Slice cu_q_slice, cu_k_slice;
};

constexpr std::uint32_t kNanF32 = 0x7fc00000u;
constexpr std::uint32_t kNanF16Pair = 0x7e007e00u;
constexpr std::uint32_t kNanBf16Pair = 0x7fc07fc0u;
// The NaN word that poisons a buffer of f32, f16 or bf16 elements (a word of two 16-bit NaNs).
inline std::uint32_t nan_word(DType dtype) {
    return dtype == DType::f16 ? kNanF16Pair : dtype == DType::bf16 ? kNanBf16Pair : kNanF32;
}

// `count` i32 values from byte `offset` of `buffer` (key lengths, cu_seqlens), bound in whole
// 16-byte units where the buffer has them.
inline Slice ints_slice(const vk::Buffer& buffer, std::uint64_t offset, std::int64_t count) {
    return {offset, std::min<std::uint64_t>((static_cast<std::uint64_t>(count) * 4 + 15) / 16 * 16, buffer.size() - offset), {}};
}

// The slices of the masks a box of (b, h, query rows) covers, for the given keys (all of them
// when `keys` is empty), indexed by absolute key.
struct MaskSlices {
    Slice bool_mask, float_mask;
};
MaskSlices mask_slices(const Problem& problem, const Operands& operands, const Box& query_box,
                       std::uint64_t alignment, Features keys = {});

// The offset alignment every binding honours: storage, texel and vec4.
std::uint64_t binding_alignment(const vk::DeviceCaps& caps);

// A whole small buffer (key lengths, unused placeholders) as a slice.
Slice whole(std::uint64_t bytes);

}  // namespace vkattn::detail

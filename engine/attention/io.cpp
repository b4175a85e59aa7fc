#include "attention/io.hpp"

#include <algorithm>
#include <bit>

#include "tensor/storage.hpp"

namespace vkattn::detail {

Operands own_buffer_operands(const Problem& p, const std::array<std::int64_t, 4>& q_strides,
                             const std::array<std::int64_t, 4>& k_strides, const std::array<std::int64_t, 4>& v_strides,
                             const std::array<std::int64_t, 4>& o_strides) {
    auto operand = [&](const std::array<std::int64_t, 4>& strides, const std::array<std::int64_t, 4>& shape,
                       DType dtype) {
        return Operand{strides, 0, allocated_bytes(span_bytes(dtype, shape, strides))};
    };
    Operands ops;
    ops.q = operand(q_strides, {p.B, p.Hq, p.Nq, p.Dk}, p.dtype);
    ops.k = operand(k_strides, {p.B, p.Hkv, p.Nkv, p.Dk}, p.k_dtype);
    ops.v = operand(v_strides, {p.B, p.Hkv, p.Nkv, p.Dv}, p.v_dtype);
    ops.o = operand(o_strides, {p.B, p.Hq, p.Nq, p.Dv}, p.dtype);
    ops.lse = operand({p.Hq * p.Nq, p.Nq, 1, 0}, {p.B, p.Hq, p.Nq, 1}, DType::f32);
    ops.weights = operand({p.Hq * p.Nq * p.Nkv, p.Nq * p.Nkv, p.Nkv, 1}, {p.B, p.Hq, p.Nq, p.Nkv}, DType::f32);
    ops.logits = ops.weights;
    ops.bool_mask = {p.bool_mask.strides, 0, allocated_bytes(static_cast<std::uint64_t>(p.bool_mask.elements))};
    ops.float_mask = {p.float_mask.strides, 0, allocated_bytes(static_cast<std::uint64_t>(p.float_mask.elements) * 4)};
    return ops;
}

PagedOperands paged_operands(const PagedSpec& s, const Problem& p) {
    auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
    auto pool = [&](std::int64_t D) {  // strides between blocks, heads, rows; D in stride.w
        TensorDesc d;
        d.stride = {u32(s.units[0] * D), u32(s.units[2] * D), u32(s.units[1] * D), u32(D)};
        return d;
    };
    PagedOperands o;
    o.addressing = {.block_size = u32(s.block_size),
                    .table_stride = u32(s.table_stride),
                    .blocks_per_pool = u32(s.blocks_per_pool),
                    .blocks = u32(s.blocks),
                    .block_shift = 32,
                    .block_units = u32(s.units[0]),
                    .row_units = u32(s.units[1])};
    if (std::has_single_bit(static_cast<std::uint64_t>(s.block_size)))
        o.addressing.block_shift = u32(std::countr_zero(static_cast<std::uint64_t>(s.block_size)));
    o.pools = u32(s.pools);
    o.k = pool(p.Dk);
    o.v = pool(p.Dv);
    o.k_pool_bytes = s.k_pool_bytes;
    o.v_pool_bytes = s.v_pool_bytes;
    return o;
}

MaskSlices mask_slices(const Problem& p, const Operands& ops, const Box& qb, std::uint64_t alignment, Features keys) {
    if (keys.length == 0) keys = {0, p.Nkv};
    MaskSlices m;
    m.bool_mask = p.bool_mask.present() ? ops.bool_mask.slice(keys, qb, 1, alignment, Indexing::absolute) : whole(16);
    m.float_mask = p.float_mask.present() ? ops.float_mask.slice(keys, qb, 4, alignment, Indexing::absolute) : whole(16);
    return m;
}

std::uint64_t binding_alignment(const vk::DeviceCaps& caps) {
    return std::max<std::uint64_t>({caps.min_storage_offset_alignment, caps.min_texel_offset_alignment, 16});
}

Slice whole(std::uint64_t bytes) { return Slice{0, (bytes + 15) / 16 * 16, {}}; }

}  // namespace vkattn::detail

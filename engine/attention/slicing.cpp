#include "attention/slicing.hpp"

#include <algorithm>

namespace vkattn::detail {

Slice slice_of(const std::array<std::int64_t, 4>& strides, std::int64_t row_length, const Box& box,
               std::uint64_t element_bytes, std::uint64_t alignment, std::uint64_t buffer_bytes) {
    const std::int64_t first = box.b0 * strides[0] + box.h0 * strides[1] + box.n0 * strides[2];
    const std::int64_t last = box.b1 * strides[0] + box.h1 * strides[1] + box.n1 * strides[2] +
                              (row_length - 1) * strides[3];
    const std::uint64_t first_byte = static_cast<std::uint64_t>(first) * element_bytes;
    const std::uint64_t aligned = first_byte - first_byte % alignment;
    const std::uint64_t end = (static_cast<std::uint64_t>(last) + 1) * element_bytes;
    Slice s;
    s.offset = aligned;
    // Ranges are rounded to 16 bytes (a vec4 texel); buffers are allocated with that slack.
    s.range = std::min<std::uint64_t>((end - aligned + 15) / 16 * 16, buffer_bytes - aligned);
    for (int i = 0; i < 4; ++i) s.desc.stride[i] = static_cast<std::uint32_t>(strides[i]);
    s.desc.origin = {static_cast<std::uint32_t>(box.b0), static_cast<std::uint32_t>(box.h0),
                     static_cast<std::uint32_t>(box.n0),
                     static_cast<std::uint32_t>((first_byte - aligned) / element_bytes)};
    return s;
}

Box query_box(const Chunk& c, std::int64_t Hq) {
    Box box;
    const std::int64_t last = c.u0 + c.units - 1;
    box.b0 = c.u0 / Hq;
    box.b1 = last / Hq;
    // Within one batch the heads are a contiguous run; across batches, all heads.
    box.h0 = box.b0 == box.b1 ? c.u0 % Hq : 0;
    box.h1 = box.b0 == box.b1 ? last % Hq : Hq - 1;
    box.n0 = c.r0;
    box.n1 = c.r0 + c.rows - 1;
    return box;
}

Box kv_box(const Chunk& c, std::int64_t Hq, std::int64_t group, std::int64_t Nkv) {
    Box box = query_box(c, Hq);
    box.h0 /= group;
    box.h1 /= group;
    box.n0 = 0;
    box.n1 = Nkv - 1;
    return box;
}

}  // namespace vkattn::detail

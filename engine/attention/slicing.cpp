#include "attention/slicing.hpp"

#include <algorithm>
#include <numeric>

namespace vkattn::detail {

Unit unit_of(DType dtype) { return Unit(block_bytes(dtype), block_elements(dtype)); }

Slice slice_of(const std::array<std::int64_t, 4>& strides, Features features, const Box& box, Unit unit,
               std::uint64_t alignment, std::uint64_t buffer_bytes, Indexing indexing, std::int64_t base) {
    const std::int64_t first = base + box.b0 * strides[0] + box.h0 * strides[1] + box.n0 * strides[2] +
                               features.begin * strides[3];
    const std::int64_t last = base + box.b1 * strides[0] + box.h1 * strides[1] + box.n1 * strides[2] +
                              (features.begin + features.length - 1) * strides[3];
    // The binding starts at the last element before `first` that begins a block on an aligned byte:
    // every `step` elements, as `step` elements take a multiple of `alignment` bytes.
    const std::uint64_t step = unit.elements * (alignment / std::gcd(unit.bytes, alignment));
    const std::uint64_t start = static_cast<std::uint64_t>(first) / step * step;
    const std::uint64_t aligned = start / unit.elements * unit.bytes;
    const std::uint64_t end = (static_cast<std::uint64_t>(last) / unit.elements + 1) * unit.bytes;
    Slice s;
    s.offset = aligned;
    // Ranges are rounded to 16 bytes (a vec4 texel); buffers are allocated with that slack.
    s.range = std::min<std::uint64_t>((end - aligned + 15) / 16 * 16, buffer_bytes - aligned);
    for (int i = 0; i < 4; ++i) s.desc.stride[i] = static_cast<std::uint32_t>(strides[i]);
    // origin.w is where feature 0 of row (b0, h0, n0) would be: absolute feature indices land on the
    // range's elements (the unsigned sum wraps exactly, as params.glsl says).
    const auto begin_in_binding = static_cast<std::uint32_t>(static_cast<std::uint64_t>(first) - start);
    const auto row0 = static_cast<std::uint32_t>(box.n0);
    const auto feature0 = static_cast<std::uint32_t>(features.begin * strides[3]);
    s.desc.origin = {static_cast<std::uint32_t>(box.b0), static_cast<std::uint32_t>(box.h0),
                     indexing == Indexing::relative_rows ? 0u : row0,
                     indexing == Indexing::relative_features ? begin_in_binding : begin_in_binding - feature0};
    return s;
}

std::vector<Features> key_slices(std::int64_t total, std::int64_t length) {
    std::vector<Features> slices;
    for (std::int64_t k = 0; k < total; k += length) slices.push_back({k, std::min(length, total - k)});
    if (slices.empty()) slices.push_back({0, 0});
    return slices;
}

std::vector<Chunk> plan_chunks(std::int64_t total, std::int64_t rows, std::int64_t row_block,
                               const std::function<bool(const Chunk&)>& fits) {
    auto halve = [](std::int64_t n) { return n == 1 ? 0 : (n + 1) / 2; };
    for (std::int64_t units = total; units >= 1; units = halve(units)) {
        std::vector<Chunk> chunks;
        bool all = true;
        for (std::int64_t u = 0; u < total && all; u += units) {
            chunks.push_back({u, std::min(units, total - u), 0, rows});
            all = fits(chunks.back());
        }
        if (all) return chunks;
    }
    for (std::int64_t step = (rows + 1) / 2; step >= 1; step = halve(step)) {
        const std::int64_t r = step >= row_block ? (step + row_block - 1) / row_block * row_block : step;
        std::vector<Chunk> chunks;
        bool all = true;
        for (std::int64_t u = 0; u < total && all; ++u)
            for (std::int64_t r0 = 0; r0 < rows && all; r0 += r) {
                chunks.push_back({u, 1, r0, std::min(r, rows - r0)});
                all = fits(chunks.back());
            }
        if (all) return chunks;
    }
    return {};
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

// The shape rules every request's tensors pass (attention/problem.hpp): layouts, disjoint
// elements, mask broadcasting, sizes that fit 64 bits.
#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "attention/problem.hpp"
#include "tensor/storage_rules.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {

std::string shape_text(const std::array<std::int64_t, 4>& s) {
    std::ostringstream out;
    out << '[' << s[0] << ", " << s[1] << ", " << s[2] << ", " << s[3] << ']';
    return out.str();
}

namespace {

// Whether every byte the view touches has a 64-bit offset. Overflow means the strides or the
// shape are nonsense (shapes are at least 1 and strides non-negative by now).
bool span_fits_64_bits(const TensorLayout& view) {
    std::int64_t end = 1;  // one past the last element offset
    for (int i = 0; i < 4; ++i) {
        std::int64_t step = 0;
        if (__builtin_mul_overflow(view.shape[i] - 1, view.strides[i], &step) ||
            __builtin_add_overflow(end, step, &end))
            return false;
    }
    std::int64_t bytes = 0;
    return !__builtin_mul_overflow(end, static_cast<std::int64_t>(block_bytes(view.dtype)), &bytes);
}

}  // namespace

void check_layout(const TensorLayout& view, const char* name) {
    for (int i = 0; i < 4; ++i) {
        if (view.shape[i] <= 0)
            throw InvalidArgument(name, "every dimension must be at least 1, but the shape is " +
                                            shape_text(view.shape) + ".");
        if (view.strides[i] < 0)
            throw InvalidArgument(name, "strides must not be negative, but they are " +
                                            shape_text(view.strides) + ".");
    }
    if (view.strides[3] != 1)
        throw InvalidArgument(name, "the feature dimension must be contiguous (stride 1), but its "
                                    "stride is " + std::to_string(view.strides[3]) + ".");
    check_block_rows(name, view.dtype, view.shape, view.strides);
    if (!span_fits_64_bits(view))
        throw InvalidArgument(name, "the shape " + shape_text(view.shape) + " with strides " +
                                        shape_text(view.strides) + " spans more than 2^63 - 1 "
                                        "bytes, so the strides or the shape are wrong.");
}

// Sufficient, not necessary: taken in order of increasing stride, every dimension must step past all
// the memory that the smaller ones cover. Every dense or padded layout passes. Dimensions of extent
// 1 never step, so their strides do not matter.
bool elements_disjoint(const TensorLayout& view) {
    std::array<int, 4> order{0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return view.strides[a] < view.strides[b]; });
    std::int64_t covered = 1;  // elements spanned by the dimensions taken so far
    for (const int d : order) {
        if (view.shape[d] == 1) continue;
        if (view.strides[d] < covered) return false;
        if (__builtin_mul_overflow(view.strides[d], view.shape[d], &covered))
            covered = std::numeric_limits<std::int64_t>::max();
    }
    return true;
}

BroadcastMask broadcast_mask(const std::vector<std::int64_t>& shape, const char* name,
                             const std::array<std::int64_t, 4>& target) {
    const auto rank = static_cast<int>(shape.size());
    if (rank > 4)
        throw InvalidArgument(name, "a mask has at most 4 dimensions, but this one has " +
                                        std::to_string(rank) + ".");
    BroadcastMask out;
    std::int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
        const int t = 4 - rank + i;  // the target dimension this one is aligned with
        const std::int64_t n = shape[static_cast<std::size_t>(i)];
        if (n != 1 && n != target[t]) {
            std::ostringstream msg;
            msg << "a mask of shape [";
            for (int k = 0; k < rank; ++k) msg << (k ? ", " : "") << shape[static_cast<std::size_t>(k)];
            msg << "] does not broadcast to [B, Hq, Nq, Nkv] = " << shape_text(target)
                << ": dimension " << i << " is " << n << ", which is neither 1 nor " << target[t]
                << ".";
            throw InvalidArgument(name, msg.str());
        }
        out.strides[t] = n == 1 ? 0 : stride;
        stride = checked_mul(stride, n, name);
    }
    out.elements = stride;
    return out;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        throw ResourceLimit(std::string(what) + ": the size " + std::to_string(a) + " x " +
                            std::to_string(b) + " overflows 64 bits.");
    return r;
}

}  // namespace vkattn::detail

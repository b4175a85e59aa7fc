// The number of elements of a dense tensor of this shape (the unit tests' host buffers).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace vkattn::test {

inline std::size_t element_count(const std::array<std::int64_t, 4>& shape) {
    return static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]);
}

// Any rank (a mask's broadcast shape); braced lists take the overload above.
inline std::size_t element_count(std::span<const std::int64_t> shape) {
    std::size_t n = 1;
    for (const std::int64_t d : shape) n *= static_cast<std::size_t>(d);
    return n;
}

}  // namespace vkattn::test

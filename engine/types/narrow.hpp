// The narrowings the runtime's descriptors and dispatch parameters take: the shaders index with 32
// bits, buffer offsets are 64-bit unsigned, and the shapes arrive as int64. Each caller bounds its
// sizes first (the planners refuse what a 32-bit index cannot reach), so these are plain casts.
#pragma once

#include <cstdint>

namespace vkattn::detail {

inline std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
inline std::uint64_t u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

}  // namespace vkattn::detail

// Dropout's random numbers: Philox 4×32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), a counter-based generator. Each attention weight has its own counter, so every
// path — and the CPU reference — drops exactly the same entries for the same seed, in any order.
// shaders/common/philox.glsl is the GPU twin of this header.
#pragma once

#include <array>
#include <cstdint>

namespace vkattn {

using PhiloxBlock = std::array<std::uint32_t, 4>;

constexpr PhiloxBlock philox4x32_10(PhiloxBlock counter, std::array<std::uint32_t, 2> key) {
    constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        const std::uint64_t p0 = std::uint64_t{kMul0} * counter[0];
        const std::uint64_t p1 = std::uint64_t{kMul1} * counter[2];
        counter = {static_cast<std::uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<std::uint32_t>(p1),
                   static_cast<std::uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<std::uint32_t>(p0)};
        key = {key[0] + kWeyl0, key[1] + kWeyl1};
    }
    return counter;
}

// The drop threshold for probability p in [0, 1): an entry is dropped when its random word is
// below it, so the drop rate is threshold / 2^32 (p rounded to a multiple of 2^-32).
constexpr std::uint32_t dropout_threshold(double p) {
    if (!(p > 0.0)) return 0;
    const double t = p * 4294967296.0 + 0.5;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
}

// Whether the weight of (batch b, query head h, query row i, key j) is kept: the first word of
// Philox(counter = (j, i, h, b), key = seed) compared with the threshold.
constexpr bool dropout_keeps(std::uint64_t seed, std::uint32_t threshold, std::uint32_t b, std::uint32_t h,
                             std::uint32_t i, std::uint32_t j) {
    const PhiloxBlock r = philox4x32_10({j, i, h, b}, {static_cast<std::uint32_t>(seed),
                                                       static_cast<std::uint32_t>(seed >> 32)});
    return r[0] >= threshold;
}

}  // namespace vkattn

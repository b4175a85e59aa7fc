// The one tuning function: from what the device is and what the problem is, choose every kernel
// variant and size. Pure (no Vulkan), so tests drive it with made-up devices.
#pragma once

#include <cstdint>
#include <string>

#include "attention/problem.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

struct BmmConfig {
    bool texel = false;         // texel-buffer vec4 loads (else scalar SSBO loads)
    bool shared_tiles = false;  // K-slices staged through shared memory
    std::uint32_t wg_m = 8, wg_n = 8;  // invocations per workgroup along rows and columns
    std::uint32_t tm = 4, tn4 = 1;     // register block: tm rows × 4·tn4 columns per invocation
    std::uint32_t ks4 = 4;             // vec4s of K per shared tile
    std::uint32_t block_rows() const { return wg_m * tm; }
    std::uint32_t block_cols() const { return wg_n * 4 * tn4; }
    std::string describe() const;
};

struct SoftmaxConfig {
    bool subgroup_ops = true;
    std::uint32_t workgroup = 64;  // a power of two
    std::string describe() const;
};

struct UnfusedConfig {
    BmmConfig scores;  // stage 1: S = scale·Q·Kᵀ
    SoftmaxConfig softmax;
    BmmConfig output;  // stage 3: O = P·V
    std::string describe() const;
};

// Whether rows of `view` can be read as vec4 texels: feature stride 1 and every other stride a
// multiple of 4 elements (so every row starts on a texel).
bool texel_aligned(const std::array<std::int64_t, 4>& strides, std::int64_t row_length);

UnfusedConfig choose_unfused(const vk::DeviceCaps& caps, const Problem& problem,
                             const std::array<std::int64_t, 4>& q_strides,
                             const std::array<std::int64_t, 4>& k_strides,
                             const std::array<std::int64_t, 4>& v_strides,
                             const VariantOverrides& overrides);

// The GEMM ceiling's configuration: the same bmm shader, tuned for one large square product.
BmmConfig choose_gemm(const vk::DeviceCaps& caps, std::int64_t m, std::int64_t n, std::int64_t k,
                      const VariantOverrides& overrides);

}  // namespace vkattn::detail

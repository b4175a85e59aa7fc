// The device facts and rules every tuning function reads the same way (attention/tuning.cpp, the
// fused kernels'; attention/product_tuning.cpp, the products'): one source of truth for each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "tensor/storage_rules.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

// CPU devices (lavapipe) invert a GPU's costs (docs/LAVAPIPE.md): their choices differ.
inline bool is_cpu(const vk::DeviceCaps& caps) { return caps.kind == vk::DeviceKind::cpu; }

// The float texel views (RGBA32F, RGBA16F) of f32 and f16; every other type is read as words and
// decoded, from a storage buffer or (the fused kernels) through R32_UINT views.
inline bool texel_supported(const vk::DeviceCaps& caps, DType dtype) {
    if (dtype == DType::f32) return caps.texel_rgba32f;
    if (dtype == DType::f16) return caps.texel_rgba16f;
    return false;
}

// The loop iterations a dispatch may spend on devices that count them (lavapipe ends loops after
// DeviceCaps::max_loop_iterations): a tenth is left for the loops outside the key loop and rounding.
inline std::int64_t loop_budget(const vk::DeviceCaps& caps) { return caps.max_loop_iterations / 10 * 9; }

// The subgroup size the subgroup-shaped kernels (the fused ones, the cooperative-matrix products) are
// built for: 8..32 lanes where the device can be told
// (8 on CPU devices), otherwise the size it reports (the shaders check it at run time). Empty with
// the reason when the device lacks what they need.
inline std::optional<std::pair<std::uint32_t, bool>> kernel_subgroup(const vk::DeviceCaps& caps, std::string& why) {
    if (!caps.subgroup_arithmetic || !caps.subgroup_shuffle) {
        why = "the device lacks subgroup arithmetic or shuffle operations in compute shaders";
        return std::nullopt;
    }
    std::uint32_t size = caps.subgroup_size;
    bool require = false;
    if (caps.subgroup_size_control) {
        size = std::clamp<std::uint32_t>(32, caps.min_subgroup_size, caps.max_subgroup_size);
        if (caps.kind == vk::DeviceKind::cpu) size = std::clamp<std::uint32_t>(8, caps.min_subgroup_size, caps.max_subgroup_size);
        require = true;
    }
    if (size == 0 || size > 128 || (size & (size - 1)) != 0) {
        why = "the subgroup size " + std::to_string(size) + " is not a power of two up to 128";
        return std::nullopt;
    }
    return std::pair{size, require};
}

}  // namespace vkattn::detail

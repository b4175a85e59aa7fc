// The device facts every tuning function reads the same way (attention/tuning.cpp, the fused
// kernels'; attention/product_tuning.cpp, the products'): one source of truth for each.
#pragma once

#include <cstdint>

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

}  // namespace vkattn::detail

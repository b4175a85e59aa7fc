// What a physical device tells, beyond the core limits, that decides how work is cut for it: its
// compute units (where a vendor extension gives them), subgroup size control, the cooperative-matrix
// shapes and types it multiplies, bf16 and fp8 shader types, timestamps. Read for `vk-attn devices`
// (DeviceInfo) and for the tuning (DeviceCaps::compute_units).
#pragma once

#include <cstdint>
#include <string>

#include <vulkan/vulkan.h>

#include "vkattn/context.hpp"

namespace vkattn::vk {

struct ComputeUnits {
    std::uint32_t count = 0;  // 0: no extension tells
    std::string source;       // the extension that told
};

// VK_NV_shader_sm_builtins' SM count, VK_AMD_shader_core_properties2's active compute units, or
// VK_ARM_shader_core_builtins' shader cores, whichever the device offers.
ComputeUnits compute_units(VkPhysicalDevice physical);

// Fills `info`'s tuning facts (the fields after `rejected` in DeviceInfo). `instance` resolves
// vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR.
void describe_tuning_facts(VkInstance instance, VkPhysicalDevice physical, DeviceInfo& info);

}  // namespace vkattn::vk

// Just enough SPIR-V reflection to build descriptor set layouts from the shader itself, so the host
// never restates a shader's bindings (and cannot get them wrong).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <vulkan/vulkan.h>

namespace vkattn::vk {

// A SPIR-V module's first word (SPIR-V specification, section 3.1).
inline constexpr std::uint32_t kSpirvMagic = 0x07230203u;

struct ReflectedBinding {
    std::uint32_t binding = 0;
    VkDescriptorType type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
};

// The bindings of descriptor set 0, sorted by binding number. Throws Error on malformed SPIR-V or on
// a descriptor kind vkattn does not use.
std::vector<ReflectedBinding> reflect_bindings(std::span<const std::uint32_t> spirv);

}  // namespace vkattn::vk

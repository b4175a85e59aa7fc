// A buffer with its own memory, chosen by intent (VulkanMemoryAllocator's usage patterns): tensors in
// device-local memory, uploads in host-visible write-combined memory, readbacks in host-cached memory.
#pragma once

#include <cstdint>
#include <string>

#include <vulkan/vulkan.h>

#include "vk/handle.hpp"

namespace vkattn::vk {

class Device;

enum class MemoryIntent : std::uint8_t { device_local, upload, readback };

class Buffer {
public:
    Buffer() = default;
    // `map_device_local`: map device-local memory when it is host-visible (zero-copy); false forces
    // the staging path. Throws ResourceLimit naming `what`, the size and the device's limit.
    Buffer(const Device& device, VkDeviceSize bytes, VkBufferUsageFlags usage, MemoryIntent intent,
           bool map_device_local, const std::string& what);

    // The caller's buffer (vkattn/vulkan.hpp): used, never destroyed, never mapped.
    static Buffer adopt(VkBuffer buffer, VkDeviceSize bytes);

    VkBuffer get() const { return buffer_.get(); }
    VkDeviceSize size() const { return size_; }
    void* mapped() const { return mapped_; }  // null when the memory is not mapped

private:
    Handle<VkBuffer> buffer_;
    Handle<VkDeviceMemory> memory_;
    VkDeviceSize size_ = 0;
    void* mapped_ = nullptr;
};

}  // namespace vkattn::vk

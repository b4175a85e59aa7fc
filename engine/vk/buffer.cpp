#include "vk/buffer.hpp"

#include "vk/check.hpp"
#include "vk/device.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::vk {

Buffer::Buffer(const Device& device, VkDeviceSize bytes, VkBufferUsageFlags usage, MemoryIntent intent,
               bool map_device_local, const std::string& what)
    : size_(bytes) {
    const auto& caps = device.caps();
    if (bytes > caps.max_allocation_bytes)
        throw ResourceLimit(what + " needs " + std::to_string(bytes) + " bytes in one allocation, "
                            "but the device allows at most " + std::to_string(caps.max_allocation_bytes) + ".");
    const VkDevice vk_device = device.get();
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = bytes == 0 ? 16 : bytes;  // zero-sized buffers are invalid; keep a placeholder
    info.usage = usage;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    VkBuffer buffer = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateBuffer(vk_device, &info, nullptr, &buffer), "creating " + what);
    buffer_ = Handle<VkBuffer>(buffer, [vk_device](VkBuffer b) { vkDestroyBuffer(vk_device, b, nullptr); });

    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vk_device, buffer, &req);
    VkMemoryPropertyFlags required = 0, preferred = 0;
    switch (intent) {
        case MemoryIntent::device_local:
            preferred = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
            break;
        case MemoryIntent::upload:
            required = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
            break;
        case MemoryIntent::readback:
            required = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
            preferred = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
            break;
    }
    const std::uint32_t type = device.memory_type(req.memoryTypeBits, required, preferred);
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = type;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    const VkResult allocated = vkAllocateMemory(vk_device, &alloc, nullptr, &memory);
    if (allocated == VK_ERROR_OUT_OF_DEVICE_MEMORY || allocated == VK_ERROR_OUT_OF_HOST_MEMORY)
        throw ResourceLimit("the device ran out of memory allocating " + std::to_string(req.size) + " bytes for " +
                            what + " (" + result_name(allocated) + "; its largest device-local heap holds " +
                            std::to_string(caps.device_memory_bytes) + " bytes, shared with other work). What this "
                            "request allocated is freed; the context stays usable for smaller requests.");
    VKATTN_CHECK(allocated, "allocating " + std::to_string(req.size) + " bytes for " + what);
    memory_ = Handle<VkDeviceMemory>(memory, [vk_device](VkDeviceMemory m) { vkFreeMemory(vk_device, m, nullptr); });
    VKATTN_CHECK(vkBindBufferMemory(vk_device, buffer, memory, 0), "binding memory to " + what);

    const auto flags = device.memory_flags(type);
    const bool host_visible = (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
                              (flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    if (host_visible && (intent != MemoryIntent::device_local || map_device_local))
        VKATTN_CHECK(vkMapMemory(vk_device, memory, 0, VK_WHOLE_SIZE, 0, &mapped_), "mapping " + what);
}

Buffer Buffer::adopt(VkBuffer buffer, VkDeviceSize bytes) {
    Buffer b;
    b.buffer_ = Handle<VkBuffer>(buffer, {});  // no destroy: the caller owns it
    b.size_ = bytes;
    return b;
}

}  // namespace vkattn::vk

// A caller's own Vulkan objects, as an application embedding vkattn makes them: its instance (with the
// validation layer and its own messenger), its device and queue, its buffers in host-visible memory
// and its command buffers. The tests hand them to vkattn (vkattn/vulkan.hpp) and check that vkattn
// records and submits on them correctly, and that the layer says nothing.
#pragma once

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vk/driver_pin.hpp"
#include "vk/instance.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn::test {

inline void vk_ok(VkResult r, const char* what) {
    if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + " failed: " + std::to_string(r));
}

struct OwnVulkanOptions {
    bool storage_16bit = true;           // enable storageBuffer16BitAccess (where offered)
    bool subgroup_size_control = true;   // enable VK_EXT_subgroup_size_control (where offered)
};

class OwnVulkan {
public:
    struct Buffer {
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        void* mapped = nullptr;
        VkDeviceSize size = 0;
        VkBufferUsageFlags usage = 0;
        VulkanBuffer handle() const { return {buffer, size, usage}; }
    };

    explicit OwnVulkan(const OwnVulkanOptions& options = {}) {
        VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
        app.pApplicationName = "vkattn test: the caller's device";
        app.apiVersion = VK_API_VERSION_1_2;
        const char* layer = "VK_LAYER_KHRONOS_validation";
        const char* debug = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        VkDebugUtilsMessengerCreateInfoEXT messenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        messenger.messageSeverity =
            VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                                VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        messenger.pfnUserCallback = &OwnVulkan::on_message;
        messenger.pUserData = this;
        VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
        info.pNext = &messenger;
        info.pApplicationInfo = &app;
        info.enabledLayerCount = 1;
        info.ppEnabledLayerNames = &layer;
        info.enabledExtensionCount = 1;
        info.ppEnabledExtensionNames = &debug;
        vk_ok(vkCreateInstance(&info, nullptr, &instance), "vkCreateInstance");
        // The drivers and layers this instance loaded stay mapped until exit, as vkattn's own
        // instances keep them (vk/driver_pin.hpp): the tests make many of these, and a test that
        // never makes a Context on one would otherwise see a driver's lifetime allocation reported
        // from an unloaded "<unknown module>" under LeakSanitizer.
        vk::keep_drivers_loaded();
        auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
        vk_ok(create(instance, &messenger, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");

        // The device the suite's own Context runs on: $VKATTN_DEVICE (an index or a name substring),
        // else the best ranked (discrete over integrated over virtual over CPU), chosen by the
        // engine's own rule, so that on a GPU machine with lavapipe also installed these tests
        // drive the GPU too.
        {
            const auto adopted = vk::Instance::adopt(instance);  // borrowed: never destroys it
            const char* request = std::getenv("VKATTN_DEVICE");
            const std::uint32_t index = vk::select_device(vk::describe_devices(*adopted, {}), request ? request : "");
            physical = adopted->physical_devices()[index];
        }
        std::uint32_t count = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, nullptr);
        std::vector<VkQueueFamilyProperties> families(count);
        vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, families.data());
        for (std::uint32_t f = 0; f < count; ++f)
            if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                family = f;
                break;
            }

        VkPhysicalDeviceVulkan11Features have11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
        VkPhysicalDeviceFeatures2 have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
        have.pNext = &have11;
        vkGetPhysicalDeviceFeatures2(physical, &have);
        features11_.storageBuffer16BitAccess = options.storage_16bit ? have11.storageBuffer16BitAccess : VK_FALSE;
        features2_.pNext = &features11_;
        std::uint32_t ext_count = 0;
        vkEnumerateDeviceExtensionProperties(physical, nullptr, &ext_count, nullptr);
        std::vector<VkExtensionProperties> exts(ext_count);
        vkEnumerateDeviceExtensionProperties(physical, nullptr, &ext_count, exts.data());
        VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size_offered{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
        VkPhysicalDeviceFeatures2 size_query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
        size_query.pNext = &size_offered;
        for (const auto& e : exts)
            if (std::strcmp(e.extensionName, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) == 0) {
                vkGetPhysicalDeviceFeatures2(physical, &size_query);
                VkPhysicalDeviceSubgroupSizeControlPropertiesEXT size_props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
                VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
                props.pNext = &size_props;
                vkGetPhysicalDeviceProperties2(physical, &props);
                size_control_offered = size_offered.subgroupSizeControl && size_offered.computeFullSubgroups &&
                                       (size_props.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
            }
        for (const auto& e : exts) {
            if (options.subgroup_size_control && std::strcmp(e.extensionName, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) == 0 &&
                size_control_offered) {
                extensions_.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
                size_control_.subgroupSizeControl = VK_TRUE;
                size_control_.computeFullSubgroups = VK_TRUE;
                features11_.pNext = &size_control_;
            }
            if (std::strcmp(e.extensionName, "VK_KHR_portability_subset") == 0) extensions_.push_back("VK_KHR_portability_subset");
        }
        queue_info_.queueFamilyIndex = family;
        queue_info_.queueCount = 1;
        queue_info_.pQueuePriorities = &priority_;
        create_info.pNext = &features2_;
        create_info.queueCreateInfoCount = 1;
        create_info.pQueueCreateInfos = &queue_info_;
        create_info.enabledExtensionCount = static_cast<std::uint32_t>(extensions_.size());
        create_info.ppEnabledExtensionNames = extensions_.data();
        vk_ok(vkCreateDevice(physical, &create_info, nullptr, &device), "vkCreateDevice");
        vkGetDeviceQueue(device, family, 0, &queue);
        vkGetPhysicalDeviceMemoryProperties(physical, &memory_);

        VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pool.queueFamilyIndex = family;
        vk_ok(vkCreateCommandPool(device, &pool, nullptr, &pool_), "vkCreateCommandPool");
    }

    ~OwnVulkan() {
        for (const Buffer& b : buffers_) {
            vkDestroyBuffer(device, b.buffer, nullptr);
            vkFreeMemory(device, b.memory, nullptr);
        }
        vkDestroyCommandPool(device, pool_, nullptr);
        vkDestroyDevice(device, nullptr);
        auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
        destroy(instance, messenger_, nullptr);
        vkDestroyInstance(instance, nullptr);
    }
    OwnVulkan(const OwnVulkan&) = delete;
    OwnVulkan& operator=(const OwnVulkan&) = delete;

    VulkanDevice handles(std::mutex* queue_mutex = nullptr) const {
        return {instance, VK_API_VERSION_1_2, physical, device, &create_info, family, 0, queue_mutex};
    }

    // A buffer in host-visible, coherent memory, mapped; freed with this object.
    Buffer buffer(VkDeviceSize bytes, VkBufferUsageFlags usage) {
        Buffer b;
        b.size = bytes;
        b.usage = usage;
        VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
        info.size = bytes;
        info.usage = usage;
        vk_ok(vkCreateBuffer(device, &info, nullptr, &b.buffer), "vkCreateBuffer");
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(device, b.buffer, &req);
        const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
        alloc.allocationSize = req.size;
        for (std::uint32_t t = 0; t < memory_.memoryTypeCount; ++t)
            if ((req.memoryTypeBits & (1u << t)) && (memory_.memoryTypes[t].propertyFlags & want) == want) {
                alloc.memoryTypeIndex = t;
                break;
            }
        vk_ok(vkAllocateMemory(device, &alloc, nullptr, &b.memory), "vkAllocateMemory");
        vk_ok(vkBindBufferMemory(device, b.buffer, b.memory, 0), "vkBindBufferMemory");
        vk_ok(vkMapMemory(device, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
        buffers_.push_back(b);
        return b;
    }

    // A primary command buffer, begun.
    VkCommandBuffer begin() {
        VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        alloc.commandPool = pool_;
        alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        alloc.commandBufferCount = 1;
        VkCommandBuffer commands = VK_NULL_HANDLE;
        vk_ok(vkAllocateCommandBuffers(device, &alloc, &commands), "vkAllocateCommandBuffers");
        VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        vk_ok(vkBeginCommandBuffer(commands, &begin), "vkBeginCommandBuffer");
        return commands;
    }

    // The contract's barrier after vkattn: its shader and transfer writes made visible to the host.
    static void barrier_to_host(VkCommandBuffer commands) {
        VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vkCmdPipelineBarrier(commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
    }

    // Ends, submits (under `queue_mutex` when given) and waits; frees the command buffer.
    void submit_and_wait(VkCommandBuffer commands, std::mutex* queue_mutex = nullptr) {
        vk_ok(vkEndCommandBuffer(commands), "vkEndCommandBuffer");
        VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VkFence fence = VK_NULL_HANDLE;
        vk_ok(vkCreateFence(device, &fence_info, nullptr, &fence), "vkCreateFence");
        VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        submit.commandBufferCount = 1;
        submit.pCommandBuffers = &commands;
        {
            std::unique_lock<std::mutex> lock;
            if (queue_mutex) lock = std::unique_lock(*queue_mutex);
            vk_ok(vkQueueSubmit(queue, 1, &submit, fence), "vkQueueSubmit");
        }
        vk_ok(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
        vkDestroyFence(device, fence, nullptr);
        vkFreeCommandBuffers(device, pool_, 1, &commands);
    }

    // Every validation message since the last call, one per line.
    std::string take_messages() {
        std::lock_guard lock(mutex_);
        std::string all;
        for (const auto& m : messages_) all += m + "\n";
        messages_.clear();
        return all;
    }

    VkInstance instance = VK_NULL_HANDLE;
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    std::uint32_t family = 0;
    VkDeviceCreateInfo create_info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    bool size_control_offered = false;  // subgroup size control for compute shaders, offered by the device

private:
    static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data, void* self) {
        auto* own = static_cast<OwnVulkan*>(self);
        std::lock_guard lock(own->mutex_);
        own->messages_.emplace_back(data->pMessage ? data->pMessage : "(no message)");
        return VK_FALSE;
    }

    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    VkPhysicalDeviceVulkan11Features features11_{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size_control_{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDeviceFeatures2 features2_{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkDeviceQueueCreateInfo queue_info_{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    float priority_ = 1.0f;
    std::vector<const char*> extensions_;
    VkPhysicalDeviceMemoryProperties memory_{};
    VkCommandPool pool_ = VK_NULL_HANDLE;
    std::vector<Buffer> buffers_;
    std::mutex mutex_;
    std::vector<std::string> messages_;
};

}  // namespace vkattn::test

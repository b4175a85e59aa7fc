// The Vulkan instance, the validation layer's messenger, and device enumeration with the reasons a
// device is rejected (vk-bootstrap's habit: say why, never just "no device").
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vk/device_facts.hpp"
#include "vk/handle.hpp"
#include "vkattn/context.hpp"

namespace vkattn::vk {

class Instance {
public:
    explicit Instance(bool validation);
    // The caller's instance (vkattn/vulkan.hpp): used, never destroyed; its layers and messengers
    // are the caller's, so messages() stays empty.
    static std::unique_ptr<Instance> adopt(VkInstance instance);

    VkInstance get() const { return instance_.get(); }
    bool validation() const { return validation_; }
    // The Vulkan header version the validation layer was built with (its specVersion); 0 without it.
    std::uint32_t validation_layer_version() const { return layer_version_; }
    // Whether no validation layer is on, or it was built with headers of `header_version` or later
    // (and so knows the structures of what came then).
    bool layer_knows(std::uint32_t header_version) const { return !validation_ || layer_version_ >= header_version; }
    // The Vulkan version the instance was created for (VkApplicationInfo::apiVersion; 0 for a
    // caller's, which the caller states): 1.2, or 1.3 where this build has a SPIR-V 1.6 kernel (the
    // workgroup-matrix kernel) and the loader knows 1.3.
    std::uint32_t api_version() const { return api_version_; }

    std::vector<VkPhysicalDevice> physical_devices() const;
    std::vector<std::string> messages() const;
    void clear_messages();

private:
    Instance() = default;
    static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT types,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                     void* self);
    bool validation_ = false;
    std::uint32_t layer_version_ = 0;
    std::uint32_t api_version_ = 0;
    Handle<VkInstance> instance_;
    Handle<VkDebugUtilsMessengerEXT> messenger_;
    mutable std::mutex messages_mutex_;
    std::vector<std::string> messages_;
};

// Describes every physical device, marks the default choice and fills `rejected` for unusable ones.
// `ask`: describe_tuning_facts's (none for a caller's instance, whose layers are unknown).
std::vector<DeviceInfo> describe_devices(const Instance& instance, NewerQueries ask);
// The queries the instance's validation layer (if any) knows the structures of.
NewerQueries newer_queries(const Instance& instance);
// Picks by request (index or name substring; empty = best ranked). Throws InvalidArgument("device").
std::uint32_t select_device(const std::vector<DeviceInfo>& devices, const std::string& request);

}  // namespace vkattn::vk

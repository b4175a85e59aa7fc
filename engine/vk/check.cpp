#include "vk/check.hpp"

#include "vkattn/errors.hpp"

namespace vkattn::vk {

const char* result_name(VkResult result) {
    switch (result) {
#define VKATTN_RESULT(name) case name: return #name;
        VKATTN_RESULT(VK_SUCCESS)
        VKATTN_RESULT(VK_NOT_READY)
        VKATTN_RESULT(VK_TIMEOUT)
        VKATTN_RESULT(VK_EVENT_SET)
        VKATTN_RESULT(VK_EVENT_RESET)
        VKATTN_RESULT(VK_INCOMPLETE)
        VKATTN_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
        VKATTN_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        VKATTN_RESULT(VK_ERROR_INITIALIZATION_FAILED)
        VKATTN_RESULT(VK_ERROR_DEVICE_LOST)
        VKATTN_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
        VKATTN_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
        VKATTN_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
        VKATTN_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
        VKATTN_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
        VKATTN_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
        VKATTN_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
        VKATTN_RESULT(VK_ERROR_FRAGMENTED_POOL)
        VKATTN_RESULT(VK_ERROR_UNKNOWN)
        VKATTN_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
        VKATTN_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        VKATTN_RESULT(VK_ERROR_FRAGMENTATION)
        VKATTN_RESULT(VK_PIPELINE_COMPILE_REQUIRED)
#undef VKATTN_RESULT
        default: return "an unknown VkResult";
    }
}

void check(VkResult result, const char* call, const std::string& context) {
    if (result == VK_SUCCESS) return;
    std::string name(call);
    name = name.substr(0, name.find('('));  // "vkCreateBuffer(device, ...)" -> "vkCreateBuffer"
    const std::string what = name + " failed with " + result_name(result) + " while " + context;
    switch (result) {
        case VK_ERROR_DEVICE_LOST:
            throw DeviceLost(what + "; the device is lost and this context refuses further work.");
        case VK_ERROR_OUT_OF_DEVICE_MEMORY:
        case VK_ERROR_OUT_OF_HOST_MEMORY:
            throw ResourceLimit(what + ".");
        default:
            throw VulkanError(name, static_cast<int>(result), result_name(result), context);
    }
}

}  // namespace vkattn::vk

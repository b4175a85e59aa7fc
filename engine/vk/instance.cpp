#include "vk/instance.hpp"

#include <algorithm>
#include <cstring>

#include "vk/check.hpp"
#include "vk/device_facts.hpp"
#include "vk/device_features.hpp"
#include "vk/driver_pin.hpp"
#include "vk/newer_extensions.hpp"
#include "vk/pipeline.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::vk {
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

// The layer's specVersion, or 0 where it is not installed.
std::uint32_t layer_version(const char* name) {
    std::uint32_t count = 0;
    vkEnumerateInstanceLayerProperties(&count, nullptr);
    std::vector<VkLayerProperties> layers(count);
    vkEnumerateInstanceLayerProperties(&count, layers.data());
    for (const VkLayerProperties& l : layers)
        if (std::strcmp(l.layerName, name) == 0) return std::max<std::uint32_t>(l.specVersion, 1);
    return 0;
}

bool has_layer(const char* name) { return layer_version(name) != 0; }

bool has_instance_extension(const char* name) {
    std::uint32_t count = 0;
    vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr);
    std::vector<VkExtensionProperties> exts(count);
    vkEnumerateInstanceExtensionProperties(nullptr, &count, exts.data());
    return std::any_of(exts.begin(), exts.end(), [&](const VkExtensionProperties& e) {
        return std::strcmp(e.extensionName, name) == 0;
    });
}

std::string version_string(std::uint32_t v) {
    return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) +
           "." + std::to_string(VK_API_VERSION_PATCH(v));
}

int rank(const std::string& type) {  // higher is better
    if (type == "discrete") return 4;
    if (type == "integrated") return 3;
    if (type == "virtual") return 2;
    if (type == "cpu") return 1;
    return 0;
}

}  // namespace

Instance::Instance(bool validation) {
    if (validation && !has_layer(kValidationLayer))
        throw Error("validation was requested but VK_LAYER_KHRONOS_validation is not installed "
                    "(Debian/Ubuntu: apt-get install vulkan-validationlayers).");
    validation_ = validation;
    layer_version_ = validation ? layer_version(kValidationLayer) : 0;

    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "vkattn";
    app.pEngineName = "vkattn";
    // 1.2 is what every kernel but one needs; the workgroup-matrix kernel is SPIR-V 1.6, which a
    // device runs only for an instance of 1.3, so a build that has it asks for 1.3 where the loader
    // knows it (a 1.2 driver still answers as 1.2).
    std::uint32_t loader = VK_API_VERSION_1_0;
    if (auto enumerate = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion")))
        enumerate(&loader);
    api_version_ = workgroup_matrix_shaders_built() && runs_spirv_1_6(loader) ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
    app.apiVersion = api_version_;

    std::vector<const char*> layers;
    std::vector<const char*> extensions;
    if (validation_) {
        layers.push_back(kValidationLayer);
        extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    }
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    // MoltenVK and other non-conformant drivers are listed only with portability enumeration.
    if (has_instance_extension(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
        info.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    info.pApplicationInfo = &app;
    info.enabledLayerCount = static_cast<std::uint32_t>(layers.size());
    info.ppEnabledLayerNames = layers.data();
    info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();

    // Validate creation and destruction too: chain a messenger into the create info.
    VkDebugUtilsMessengerCreateInfoEXT messenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                            VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                            VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    messenger.pfnUserCallback = &Instance::on_message;
    messenger.pUserData = this;
    if (validation_) info.pNext = &messenger;

    VkInstance instance = VK_NULL_HANDLE;
    const VkResult created = vkCreateInstance(&info, nullptr, &instance);
    if (created == VK_ERROR_INCOMPATIBLE_DRIVER)
        throw Error("no Vulkan driver was found (vkCreateInstance returned "
                    "VK_ERROR_INCOMPATIBLE_DRIVER); on a machine without a GPU install Mesa's "
                    "lavapipe: apt-get install mesa-vulkan-drivers.");
    VKATTN_CHECK(created, "creating the Vulkan instance");
    instance_ = Handle<VkInstance>(instance, [](VkInstance i) { vkDestroyInstance(i, nullptr); });
    keep_drivers_loaded();  // the drivers and layers the loader just opened (vk/driver_pin.hpp)

    if (validation_) {
        auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
        auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
        VkDebugUtilsMessengerEXT handle = VK_NULL_HANDLE;
        VKATTN_CHECK(create(instance, &messenger, nullptr, &handle), "installing the validation messenger");
        messenger_ = Handle<VkDebugUtilsMessengerEXT>(
            handle, [instance, destroy](VkDebugUtilsMessengerEXT m) { destroy(instance, m, nullptr); });
    }
}

std::unique_ptr<Instance> Instance::adopt(VkInstance instance) {
    std::unique_ptr<Instance> adopted(new Instance());
    adopted->instance_ = Handle<VkInstance>(instance, {});  // no destroy: the caller owns it
    keep_drivers_loaded();  // the drivers and layers the caller's loader opened
    return adopted;
}

VkBool32 Instance::on_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* self) {
    auto* instance = static_cast<Instance*>(self);
    std::lock_guard lock(instance->messages_mutex_);
    instance->messages_.emplace_back(data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
}

std::vector<std::string> Instance::messages() const {
    std::lock_guard lock(messages_mutex_);
    return messages_;
}

void Instance::clear_messages() {
    std::lock_guard lock(messages_mutex_);
    messages_.clear();
}

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
    std::uint32_t count = 0;
    VKATTN_CHECK(vkEnumeratePhysicalDevices(get(), &count, nullptr), "counting Vulkan devices");
    std::vector<VkPhysicalDevice> devices(count);
    VKATTN_CHECK(vkEnumeratePhysicalDevices(get(), &count, devices.data()), "listing Vulkan devices");
    return devices;
}

NewerQueries newer_queries(const Instance& instance) {
    return {.bf16 = instance.layer_knows(kBfloat16HeaderVersion),
            .matrix2 = instance.layer_knows(kCooperativeMatrix2HeaderVersion),
            .spirv_1_6 = runs_spirv_1_6(instance.api_version())};
}

std::vector<DeviceInfo> describe_devices(const Instance& instance, NewerQueries ask) {
    std::vector<DeviceInfo> out;
    const auto devices = instance.physical_devices();
    for (std::uint32_t i = 0; i < devices.size(); ++i) {
        VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
        VkPhysicalDeviceFloatControlsProperties float_controls{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
        driver.pNext = &float_controls;
        VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
        subgroup.pNext = &driver;
        VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        props.pNext = &subgroup;
        vkGetPhysicalDeviceProperties2(devices[i], &props);
        VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
        VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
        f11.pNext = &f12;
        VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
        features.pNext = &f11;
        if (props.properties.apiVersion >= VK_API_VERSION_1_2) vkGetPhysicalDeviceFeatures2(devices[i], &features);

        DeviceInfo info;
        info.index = i;
        info.name = props.properties.deviceName;
        switch (props.properties.deviceType) {
            case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info.type = "discrete"; break;
            case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info.type = "integrated"; break;
            case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: info.type = "virtual"; break;
            case VK_PHYSICAL_DEVICE_TYPE_CPU: info.type = "cpu"; break;
            default: info.type = "other"; break;
        }
        info.driver = std::string(driver.driverName) + " " + driver.driverInfo;
        info.api_version = version_string(props.properties.apiVersion);
        info.subgroup_size = subgroup.subgroupSize;
        info.shared_memory_bytes = props.properties.limits.maxComputeSharedMemorySize;
        info.max_storage_buffer_range = props.properties.limits.maxStorageBufferRange;
        info.fp16_storage = f11.storageBuffer16BitAccess == VK_TRUE;
        info.fp16_arithmetic = f12.shaderFloat16 == VK_TRUE;
        info.int8_arithmetic = f12.shaderInt8 == VK_TRUE;
        info.inf_nan_preserve = float_controls.shaderSignedZeroInfNanPreserveFloat32 == VK_TRUE;
        VkPhysicalDeviceMemoryProperties memory;
        vkGetPhysicalDeviceMemoryProperties(devices[i], &memory);
        for (std::uint32_t h = 0; h < memory.memoryHeapCount; ++h)
            info.heaps.push_back({memory.memoryHeaps[h].size,
                                  (memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});
        describe_tuning_facts(instance.get(), devices[i], info, ask);
        if (props.properties.apiVersion < VK_API_VERSION_1_2)
            info.rejected = "it supports Vulkan " + info.api_version + ", and vkattn needs 1.2";
        out.push_back(std::move(info));
    }
    int best = -1;
    for (std::size_t i = 0; i < out.size(); ++i)
        if (out[i].rejected.empty() && (best < 0 || rank(out[i].type) > rank(out[static_cast<std::size_t>(best)].type)))
            best = static_cast<int>(i);
    if (best >= 0) out[static_cast<std::size_t>(best)].default_choice = true;
    return out;
}

std::uint32_t select_device(const std::vector<DeviceInfo>& devices, const std::string& request) {
    std::string listing;
    for (const auto& d : devices)
        listing += "\n  " + std::to_string(d.index) + ": " + d.name + " (" + d.type + ")" +
                   (d.rejected.empty() ? "" : " - unusable: " + d.rejected);
    if (devices.empty())
        throw Error("no Vulkan device was found; on a machine without a GPU install Mesa's lavapipe: "
                    "apt-get install mesa-vulkan-drivers.");
    auto usable = [&](const DeviceInfo& d) {
        if (!d.rejected.empty())
            throw InvalidArgument("device", "device " + std::to_string(d.index) + " (" + d.name +
                                                ") cannot be used: " + d.rejected + ".");
        return d.index;
    };
    if (request.empty()) {
        for (const auto& d : devices)
            if (d.default_choice) return d.index;
        throw Error("no usable Vulkan device was found:" + listing);
    }
    if (std::all_of(request.begin(), request.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        const unsigned long index = std::stoul(request);
        if (index >= devices.size())
            throw InvalidArgument("device", "there is no device " + request + "; the devices are:" + listing);
        return usable(devices[index]);
    }
    for (const auto& d : devices)
        if (d.name.find(request) != std::string::npos) return usable(d);
    throw InvalidArgument("device", "no device name contains \"" + request + "\"; the devices are:" + listing);
}

}  // namespace vkattn::vk

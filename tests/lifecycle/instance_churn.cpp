// vkattn_instance_churn: a minimal reproduction, in raw Vulkan calls (the engine only where a mode
// names it), of what creating and destroying Vulkan instances over and over does to a process. Each cycle
// creates an instance, enumerates its devices, creates a logical device on the first with a
// compute queue, runs nothing, destroys both. Modes:
//   plain   the cycles alone: when the last instance goes, the loader dlcloses the driver, and the
//           next cycle loads it again;
//   keeper  one extra instance created first and kept for the whole run (one instance shared for
//           the process's life would do the same): the driver is never unloaded;
//   pin     in the first cycle, while its instance lives, every loaded library gets one more
//           reference (vk::keep_drivers_loaded, the engine's one call: dlopen with RTLD_NOLOAD),
//           so the loader's dlclose no longer unmaps the driver;
//   engine  the same cycles through vkattn::Context (validation off), the engine's own behaviour.
// It prints one line per failing cycle and a summary `mode: N of M cycles created` and exits 1 when
// a cycle failed. Run with VK_LOADER_DEBUG=error to see why the loader gave up.
//
//   vkattn_instance_churn [plain|keeper|pin|engine] [cycles]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vk/driver_pin.hpp"
#include "vkattn/context.hpp"

namespace {

VkInstance create_instance(VkResult& result) {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "vkattn_instance_churn";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    VkInstance instance = VK_NULL_HANDLE;
    result = vkCreateInstance(&info, nullptr, &instance);
    return result == VK_SUCCESS ? instance : VK_NULL_HANDLE;
}

// One cycle: instance, first device, a logical device with one compute queue, all destroyed.
// `pin`: the libraries loaded while the instance lives are pinned. Returns "", or what failed.
std::string cycle(bool pin) {
    VkResult result = VK_SUCCESS;
    VkInstance instance = create_instance(result);
    if (!instance) return "vkCreateInstance returned " + std::to_string(result);
    if (pin) vkattn::vk::keep_drivers_loaded();
    std::string failure;
    std::uint32_t count = 0;
    vkEnumeratePhysicalDevices(instance, &count, nullptr);
    std::vector<VkPhysicalDevice> devices(count);
    vkEnumeratePhysicalDevices(instance, &count, devices.data());
    if (devices.empty()) failure = "no physical device";
    if (failure.empty()) {
        std::uint32_t families = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(devices[0], &families, nullptr);
        std::vector<VkQueueFamilyProperties> props(families);
        vkGetPhysicalDeviceQueueFamilyProperties(devices[0], &families, props.data());
        std::uint32_t family = 0;
        while (family < families && !(props[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
        const float priority = 1.0f;
        VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
        queue.queueFamilyIndex = family;
        queue.queueCount = 1;
        queue.pQueuePriorities = &priority;
        VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
        info.queueCreateInfoCount = 1;
        info.pQueueCreateInfos = &queue;
        VkDevice device = VK_NULL_HANDLE;
        result = vkCreateDevice(devices[0], &info, nullptr, &device);
        if (result != VK_SUCCESS) failure = "vkCreateDevice returned " + std::to_string(result);
        else vkDestroyDevice(device, nullptr);
    }
    vkDestroyInstance(instance, nullptr);
    return failure;
}

std::string engine_cycle() {
    try {
        vkattn::ContextOptions options;
        options.pipeline_cache_dir = "none";
        vkattn::Context context(options);
        return {};
    } catch (const std::exception& e) {
        return e.what();
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "plain";
    const int cycles = argc > 2 ? std::atoi(argv[2]) : 30;
    if ((mode != "plain" && mode != "keeper" && mode != "pin" && mode != "engine") || cycles < 1) {
        std::fprintf(stderr, "usage: vkattn_instance_churn [plain|keeper|pin|engine] [cycles >= 1]\n");
        return 2;
    }
    VkInstance keeper = VK_NULL_HANDLE;
    if (mode == "keeper") {
        VkResult result = VK_SUCCESS;
        keeper = create_instance(result);
        if (!keeper) {
            std::printf("keeper: vkCreateInstance returned %d\n", result);
            return 1;
        }
    }
    int created = 0;
    for (int i = 1; i <= cycles; ++i) {
        const std::string failure = mode == "engine" ? engine_cycle() : cycle(mode == "pin" && i == 1);
        if (failure.empty()) ++created;
        else std::printf("%s: cycle %d failed: %s\n", mode.c_str(), i, failure.c_str());
    }
    if (keeper) vkDestroyInstance(keeper, nullptr);
    std::printf("%s: %d of %d cycles created\n", mode.c_str(), created, cycles);
    return created == cycles ? 0 : 1;
}

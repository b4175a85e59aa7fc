// A Vulkan application that embeds vkattn: it creates its own instance, device and queue, writes Q, K
// and V into its own buffer, records vkattn's attention into its own command buffer between work of
// its own, submits, and checks O against the CPU reference that ships with vkattn.
//
//   own_device [--validate]   --validate: the Khronos validation layer on; any message fails
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <vkattn/vkattn.hpp>
#include <vkattn/vulkan.hpp>

namespace {

int validation_messages = 0;

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
    std::fprintf(stderr, "validation: %s\n", data->pMessage);
    ++validation_messages;
    return VK_FALSE;
}

void check(VkResult result, const char* call) {
    if (result != VK_SUCCESS) throw std::runtime_error(std::string(call) + " failed: " + std::to_string(result));
}

}  // namespace

int main(int argc, char** argv) try {
    const bool validate = argc > 1 && std::string(argv[1]) == "--validate";

    // The application's instance (Vulkan 1.2), with the validation layer and a messenger of its own.
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "own_device";
    app.apiVersion = VK_API_VERSION_1_2;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* debug_utils = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkDebugUtilsMessengerCreateInfoEXT messenger_info{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    messenger_info.messageSeverity =
        VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    messenger_info.pfnUserCallback = on_message;
    VkInstanceCreateInfo instance_info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    instance_info.pApplicationInfo = &app;
    if (validate) {
        instance_info.pNext = &messenger_info;
        instance_info.enabledLayerCount = 1;
        instance_info.ppEnabledLayerNames = &layer;
        instance_info.enabledExtensionCount = 1;
        instance_info.ppEnabledExtensionNames = &debug_utils;
    }
    VkInstance instance = VK_NULL_HANDLE;
    check(vkCreateInstance(&instance_info, nullptr, &instance), "vkCreateInstance");
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    if (validate) {
        auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
        check(create(instance, &messenger_info, nullptr, &messenger), "vkCreateDebugUtilsMessengerEXT");
    }

    // Its first Vulkan 1.2 device, a compute queue, and 16-bit storage where offered. vkattn is told
    // what was enabled through the create info.
    std::uint32_t count = 0;
    vkEnumeratePhysicalDevices(instance, &count, nullptr);
    std::vector<VkPhysicalDevice> physicals(count);
    vkEnumeratePhysicalDevices(instance, &count, physicals.data());
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    for (VkPhysicalDevice p : physicals) {
        VkPhysicalDeviceProperties props;
        vkGetPhysicalDeviceProperties(p, &props);
        if (VK_API_VERSION_MINOR(props.apiVersion) >= 2 && physical == VK_NULL_HANDLE) physical = p;
    }
    if (physical == VK_NULL_HANDLE) throw std::runtime_error("no Vulkan 1.2 device");
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, families.data());
    std::uint32_t family = 0;
    while (!(families[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
    VkPhysicalDeviceVulkan11Features features11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &features11;
    vkGetPhysicalDeviceFeatures2(physical, &features);  // enable what is offered of these
    std::vector<const char*> extensions;
    std::uint32_t ext_count = 0;
    vkEnumerateDeviceExtensionProperties(physical, nullptr, &ext_count, nullptr);
    std::vector<VkExtensionProperties> exts(ext_count);
    vkEnumerateDeviceExtensionProperties(physical, nullptr, &ext_count, exts.data());
    for (const auto& e : exts)
        if (std::strcmp(e.extensionName, "VK_KHR_portability_subset") == 0) extensions.push_back("VK_KHR_portability_subset");
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue_info.queueFamilyIndex = family;
    queue_info.queueCount = 1;
    queue_info.pQueuePriorities = &priority;
    VkDeviceCreateInfo device_info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    device_info.pNext = &features;
    device_info.queueCreateInfoCount = 1;
    device_info.pQueueCreateInfos = &queue_info;
    device_info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    device_info.ppEnabledExtensionNames = extensions.data();
    VkDevice device = VK_NULL_HANDLE;
    check(vkCreateDevice(physical, &device_info, nullptr, &device), "vkCreateDevice");
    VkQueue queue = VK_NULL_HANDLE;
    vkGetDeviceQueue(device, family, 0, &queue);

    // One host-visible buffer of its own holds Q, K, V and O, each at a 256-byte boundary.
    const std::int64_t B = 1, Hq = 8, Hkv = 2, Nq = 7, Nkv = 50, D = 32;
    const std::uint64_t q_bytes = B * Hq * Nq * D * 4, kv_bytes = B * Hkv * Nkv * D * 4;
    const std::uint64_t q_at = 0, k_at = q_bytes, v_at = k_at + kv_bytes, o_at = v_at + kv_bytes;
    const std::uint64_t bytes = o_at + q_bytes;
    VkBufferCreateInfo buffer_info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    buffer_info.size = bytes;
    buffer_info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                        VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    VkBuffer buffer = VK_NULL_HANDLE;
    check(vkCreateBuffer(device, &buffer_info, nullptr, &buffer), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, buffer, &req);
    VkPhysicalDeviceMemoryProperties memory_props;
    vkGetPhysicalDeviceMemoryProperties(physical, &memory_props);
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.allocationSize = req.size;
    while (!((req.memoryTypeBits >> alloc.memoryTypeIndex) & 1u) ||
           (memory_props.memoryTypes[alloc.memoryTypeIndex].propertyFlags & host) != host)
        ++alloc.memoryTypeIndex;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    check(vkAllocateMemory(device, &alloc, nullptr, &memory), "vkAllocateMemory");
    check(vkBindBufferMemory(device, buffer, memory, 0), "vkBindBufferMemory");
    float* mapped = nullptr;
    check(vkMapMemory(device, memory, 0, VK_WHOLE_SIZE, 0, reinterpret_cast<void**>(&mapped)), "vkMapMemory");
    float* q = mapped + q_at / 4;
    float* k = mapped + k_at / 4;
    float* v = mapped + v_at / 4;
    const float* o = mapped + o_at / 4;
    for (std::int64_t i = 0; i < B * Hq * Nq * D; ++i) q[i] = std::sin(0.37f * static_cast<float>(i));
    for (std::int64_t i = 0; i < B * Hkv * Nkv * D; ++i) k[i] = std::cos(0.11f * static_cast<float>(i));
    for (std::int64_t i = 0; i < B * Hkv * Nkv * D; ++i) v[i] = std::sin(0.05f * static_cast<float>(i) + 1.0f);

    double worst = 0;
    std::string variant;
    {
        // vkattn on the application's device and queue, its buffer as tensors, a plan made once.
        vkattn::Context context(vkattn::VulkanDevice{.instance = instance, .api_version = app.apiVersion,
                                                     .physical_device = physical, .device = device,
                                                     .create_info = &device_info, .queue_family = family});
        using vkattn::DType;
        const vkattn::VulkanBuffer mine{buffer, bytes, buffer_info.usage};
        const vkattn::DeviceAttentionInputs in{.q = vkattn::wrap(context, mine, q_at, DType::f32, {B, Hq, Nq, D}),
                                               .k = vkattn::wrap(context, mine, k_at, DType::f32, {B, Hkv, Nkv, D}),
                                               .v = vkattn::wrap(context, mine, v_at, DType::f32, {B, Hkv, Nkv, D})};
        const vkattn::DeviceAttentionOutputs out{.o = vkattn::wrap(context, mine, o_at, DType::f32, {B, Hq, Nq, D})};
        const vkattn::AttentionOptions options{.causal = vkattn::Causal::bottom_right};
        const vkattn::AttentionPlan plan(context, in, out, options);
        variant = plan.report().variant;

        // The application's command buffer: its own clear of O, vkattn's attention, then the
        // barrier the contract asks of it before the host reads O.
        VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pool_info.queueFamilyIndex = family;
        VkCommandPool pool = VK_NULL_HANDLE;
        check(vkCreateCommandPool(device, &pool_info, nullptr, &pool), "vkCreateCommandPool");
        VkCommandBufferAllocateInfo command_info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        command_info.commandPool = pool;
        command_info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        command_info.commandBufferCount = 1;
        VkCommandBuffer commands = VK_NULL_HANDLE;
        check(vkAllocateCommandBuffers(device, &command_info, &commands), "vkAllocateCommandBuffers");
        VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        check(vkBeginCommandBuffer(commands, &begin), "vkBeginCommandBuffer");
        vkCmdFillBuffer(commands, buffer, o_at, q_bytes, 0x7fc00000u);  // NaN: nothing unwritten passes

        vkattn::Batch batch = vkattn::record_into(context, commands);  // vkattn orders itself after the fill
        plan.run(batch, in, out);
        vkattn::RecordedWork work = batch.finish();

        VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        to_host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vkCmdPipelineBarrier(commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, nullptr, 0, nullptr);
        check(vkEndCommandBuffer(commands), "vkEndCommandBuffer");

        VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VkFence fence = VK_NULL_HANDLE;
        check(vkCreateFence(device, &fence_info, nullptr, &fence), "vkCreateFence");
        VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        submit.commandBufferCount = 1;
        submit.pCommandBuffers = &commands;
        check(vkQueueSubmit(queue, 1, &submit, fence), "vkQueueSubmit");
        check(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
        work.complete();  // the commands are done: vkattn may free what they used
        vkDestroyFence(device, fence, nullptr);
        vkDestroyCommandPool(device, pool, nullptr);

        // The CPU reference over the same data.
        std::vector<float> ref(static_cast<std::size_t>(B * Hq * Nq * D));
        using vkattn::Layout;
        vkattn::reference_attention(
            {.q = vkattn::make_view<const void*>(q, DType::f32, Layout::bhnd, {B, Hq, Nq, D}),
             .k = vkattn::make_view<const void*>(k, DType::f32, Layout::bhnd, {B, Hkv, Nkv, D}),
             .v = vkattn::make_view<const void*>(v, DType::f32, Layout::bhnd, {B, Hkv, Nkv, D})},
            {.o = vkattn::make_view<void*>(ref.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, D})}, options);
        for (std::size_t i = 0; i < ref.size(); ++i)
            worst = std::isnan(o[i]) ? INFINITY : std::fmax(worst, std::fabs(o[i] - ref[i]));
    }  // vkattn's objects go before the device they live on

    vkDestroyBuffer(device, buffer, nullptr);
    vkFreeMemory(device, memory, nullptr);
    vkDestroyDevice(device, nullptr);
    if (messenger != VK_NULL_HANDLE)
        reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"))(
            instance, messenger, nullptr);
    vkDestroyInstance(instance, nullptr);
    std::printf("%s recorded into the application's command buffer: max |gpu - cpu| = %.2e, %d validation messages\n",
                variant.c_str(), worst, validation_messages);
    return worst < 1e-4 && validation_messages == 0 ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "own_device: %s\n", e.what());
    return 1;
}

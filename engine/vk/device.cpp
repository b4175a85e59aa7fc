#include "vk/device.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "vk/check.hpp"
#include "vk/device_facts.hpp"
#include "vk/newer_extensions.hpp"
#include "vk/pipeline.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::vk {
namespace {

// Whether this build has the workgroup-matrix kernel and the device supports what it uses (asked
// only then: the query chains VK_NV_cooperative_matrix2's structure).
bool workgroup_matrix_shader_ready(VkPhysicalDevice physical) {
    return workgroup_matrix_shaders_built() && supports_workgroup_matrices(physical);
}

bool texel_format_supported(VkPhysicalDevice physical, VkFormat format) {
    VkFormatProperties props;
    vkGetPhysicalDeviceFormatProperties(physical, format, &props);
    return (props.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT) != 0;
}

std::uint32_t compute_queue_family(VkPhysicalDevice physical) {
    std::uint32_t family_count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &family_count, nullptr);
    std::vector<VkQueueFamilyProperties> families(family_count);
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &family_count, families.data());
    // Prefer a compute queue without graphics (async compute on GPUs), else any compute queue; one
    // with timestamps first.
    for (int pass = 0; pass < 2; ++pass)
        for (std::uint32_t f = 0; f < family_count; ++f) {
            const auto flags = families[f].queueFlags;
            if ((flags & VK_QUEUE_COMPUTE_BIT) && (pass == 1 || !(flags & VK_QUEUE_GRAPHICS_BIT)) &&
                families[f].timestampValidBits > 0)
                return f;
        }
    for (std::uint32_t f = 0; f < family_count; ++f)
        if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) return f;
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(physical, &props);
    throw Error(std::string("the device ") + props.deviceName + " has no compute queue.");
}

}  // namespace

Device::Device(VkPhysicalDevice physical, const DeviceOptions& options) : physical_(physical), options_(options) {
    queue_family_ = compute_queue_family(physical);
    // Enable only what we use, and only where it exists.
    available_ = available_features(physical);
    features_ = available_;
    features_.cooperative_matrix = available_.cooperative_matrix && options.newer_structures && options.f16_matrix_tile.found();
    features_.bf16_matrices = features_.cooperative_matrix && available_.bf16_matrices && options.bf16_structures &&
                              options.bf16_matrix_shape && bf16_unit_shaders_built() && supports_bf16_matrices(physical);
    features_.flexible_matrices = features_.cooperative_matrix && options.flexible_matrix_shapes;
    // Asked only where the structure may be chained (options.workgroup_matrices); what the device
    // offers is then what DeviceInfo describes.
    available_.workgroup_matrices = available_.cooperative_matrix && options.workgroup_matrices && workgroup_matrix_shader_ready(physical);
    features_.workgroup_matrices = features_.cooperative_matrix && available_.workgroup_matrices &&
                                  offers_workgroup_matrices(options.workgroup_matrix_granularity);
    features_.maximal_reconvergence = available_.maximal_reconvergence && options.maximal_reconvergence;
    features_.pipeline_statistics = available_.pipeline_statistics && options.kernel_statistics;
    VkPhysicalDeviceVulkan11Features want11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features want12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    want11.pNext = &want12;
    want11.storageBuffer16BitAccess = features_.storage_16bit;
    want11.uniformAndStorageBuffer16BitAccess = features_.uniform_storage_16bit;
    want12.shaderFloat16 = features_.float16;
    want12.shaderInt8 = features_.int8;
    // Each optional feature's structure, where wanted, spliced into the chain after want12.
    auto chain = [&want12](auto& structure) {
        structure.pNext = want12.pNext;
        want12.pNext = &structure;
    };
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT want_size{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    if (features_.subgroup_size_control) {
        want_size.subgroupSizeControl = VK_TRUE;
        want_size.computeFullSubgroups = VK_TRUE;
        chain(want_size);
    }
    // The matrix units' shaders use the Vulkan memory model (common/coopmat.glsl).
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR want_matrices{VKATTN_STYPE_COOPERATIVE_MATRIX_FEATURES_KHR};
    if (features_.cooperative_matrix) {
        want_matrices.cooperativeMatrix = VK_TRUE;
        want12.vulkanMemoryModel = VK_TRUE;
        chain(want_matrices);
    }
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV want_flexible{VKATTN_STYPE_COOPERATIVE_MATRIX_2_FEATURES_NV};
    if (features_.flexible_matrices || features_.workgroup_matrices) {
        want_flexible.cooperativeMatrixFlexibleDimensions = VK_TRUE;
        if (features_.workgroup_matrices) {
            want_flexible.cooperativeMatrixWorkgroupScope = VK_TRUE;
            want_flexible.cooperativeMatrixTensorAddressing = VK_TRUE;
            want_flexible.cooperativeMatrixReductions = VK_TRUE;
            want_flexible.cooperativeMatrixConversions = VK_TRUE;
            want_flexible.cooperativeMatrixPerElementOperations = VK_TRUE;
        }
        chain(want_flexible);
    }
    // The workgroup-matrix kernels are SPIR-V 1.6, where glslang writes a specialized workgroup size
    // as LocalSizeId, which needs maintenance4 (core in 1.3, so no extension; its own structure, not
    // VkPhysicalDeviceVulkan13Features, which may not sit beside the subgroup-size-control one).
    VkPhysicalDeviceMaintenance4Features want_maintenance4{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES};
    if (features_.workgroup_matrices) {
        want_maintenance4.maintenance4 = VK_TRUE;
        chain(want_maintenance4);
    }
    VkPhysicalDeviceShaderBfloat16FeaturesKHR want_bf16{VKATTN_STYPE_SHADER_BFLOAT16_FEATURES_KHR};
    if (features_.bf16_matrices) {
        want_bf16.shaderBFloat16Type = VK_TRUE;
        want_bf16.shaderBFloat16CooperativeMatrix = VK_TRUE;
        chain(want_bf16);
    }
    VkPhysicalDeviceShaderMaximalReconvergenceFeaturesKHR want_reconvergence{VKATTN_STYPE_MAXIMAL_RECONVERGENCE_FEATURES_KHR};
    if (features_.maximal_reconvergence) {
        want_reconvergence.shaderMaximalReconvergence = VK_TRUE;
        chain(want_reconvergence);
    }
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR want_executables{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    if (features_.pipeline_statistics) {
        want_executables.pipelineExecutableInfo = VK_TRUE;
        chain(want_executables);
    }
    VkPhysicalDeviceShaderClockFeaturesKHR want_clock{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
    if (features_.subgroup_clock) {
        want_clock.shaderSubgroupClock = VK_TRUE;
        chain(want_clock);
    }
    VkPhysicalDeviceFeatures2 want{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    want.pNext = &want11;
    want.features.shaderInt64 = features_.int64;

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue_info.queueFamilyIndex = queue_family_;
    queue_info.queueCount = 1;
    queue_info.pQueuePriorities = &priority;

    std::vector<const char*> extensions;
    // MoltenVK requires the portability subset be enabled when offered.
    if (features_.portability_subset) extensions.push_back("VK_KHR_portability_subset");
    if (features_.subgroup_size_control) extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    if (features_.cooperative_matrix) extensions.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    if (features_.flexible_matrices || features_.workgroup_matrices) extensions.push_back(VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME);
    if (features_.bf16_matrices) extensions.push_back(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
    if (features_.maximal_reconvergence) extensions.push_back(VK_KHR_SHADER_MAXIMAL_RECONVERGENCE_EXTENSION_NAME);
    if (features_.pipeline_statistics) extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    if (features_.subgroup_clock) extensions.push_back(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);

    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    info.pNext = &want;
    info.queueCreateInfoCount = 1;
    info.pQueueCreateInfos = &queue_info;
    info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    VkDevice device = VK_NULL_HANDLE;
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(physical, &props);
    VKATTN_CHECK(vkCreateDevice(physical, &info, nullptr, &device),
                 std::string("creating a logical device on ") + props.deviceName);
    device_ = Handle<VkDevice>(device, [](VkDevice d) {
        vkDeviceWaitIdle(d);
        vkDestroyDevice(d, nullptr);
    });
    vkGetDeviceQueue(device, queue_family_, 0, &queue_);
    describe();
}

Device::Device(VkPhysicalDevice physical, VkDevice device, std::uint32_t queue_family, std::uint32_t queue_index,
               const DeviceFeatures& enabled, const DeviceOptions& options)
    : physical_(physical), device_(device, {}), queue_family_(queue_family), features_(enabled),
      available_(available_features(physical)), options_(options), adopted_(true) {
    // The caller's layers are unknown, so VK_NV_cooperative_matrix2's structure is not queried: what
    // its create info enabled, the device supports.
    available_.workgroup_matrices = enabled.workgroup_matrices;
    features_.maximal_reconvergence = features_.maximal_reconvergence && options.maximal_reconvergence;
    features_.pipeline_statistics = features_.pipeline_statistics && options.kernel_statistics;
    vkGetDeviceQueue(device, queue_family_, queue_index, &queue_);
    describe();
}

void Device::describe() {
    const VkPhysicalDevice physical = physical_;
    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceFloatControlsProperties float_controls{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT size_props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
    subgroup.pNext = &float_controls;
    if (features_.subgroup_size_control) float_controls.pNext = &size_props;
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &subgroup;
    vkGetPhysicalDeviceProperties2(physical, &props);
    const VkPhysicalDeviceLimits& limits = props.properties.limits;
    vkGetPhysicalDeviceMemoryProperties(physical, &memory_);

    std::uint32_t family_count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &family_count, nullptr);
    std::vector<VkQueueFamilyProperties> families(family_count);
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &family_count, families.data());
    caps_.timestamps = queue_family_ < family_count && families[queue_family_].timestampValidBits > 0;

    caps_.name = props.properties.deviceName;
    switch (props.properties.deviceType) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: caps_.kind = DeviceKind::discrete; break;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: caps_.kind = DeviceKind::integrated; break;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: caps_.kind = DeviceKind::virtual_gpu; break;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: caps_.kind = DeviceKind::cpu; break;
        default: caps_.kind = DeviceKind::other; break;
    }
    caps_.vendor_id = props.properties.vendorID;
    caps_.preserve_inf_nan_f32 = float_controls.shaderSignedZeroInfNanPreserveFloat32 == VK_TRUE;
    caps_.maximal_reconvergence = features_.maximal_reconvergence;
    caps_.kernel_statistics = features_.pipeline_statistics;
    caps_.subgroup_clock = features_.subgroup_clock;
    if (std::string(props.properties.deviceName).find("llvmpipe") != std::string::npos) caps_.max_loop_iterations = 65535;
    caps_.subgroup_size = subgroup.subgroupSize;
    caps_.compute_units = compute_units(physical).count;
    const bool compute_subgroups = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    caps_.subgroup_arithmetic =
        compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    caps_.subgroup_shuffle =
        compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    caps_.subgroup_size_control = features_.subgroup_size_control;
    // As describe_matrix_units says (vk/device_facts.hpp): the feature on, the shape offered, the shaders built.
    caps_.matrix_units = features_.cooperative_matrix && options_.f16_matrix_tile.found() && matrix_unit_shaders_built() &&
                         (!options_.f16_matrix_tile.parts() || matrix_part_shaders_built());
    if (caps_.matrix_units) caps_.matrix_tile = options_.f16_matrix_tile;
    caps_.bf16_matrix_units = caps_.matrix_units && features_.bf16_matrices && options_.bf16_matrix_shape && bf16_unit_shaders_built();
    caps_.workgroup_matrices = caps_.matrix_units && features_.workgroup_matrices &&
                               offers_workgroup_matrices(options_.workgroup_matrix_granularity) && workgroup_matrix_shaders_built();
    if (caps_.workgroup_matrices) caps_.workgroup_matrix_granularity = options_.workgroup_matrix_granularity;
    caps_.workgroup_bf16_matrices = caps_.workgroup_matrices && caps_.bf16_matrix_units &&
                                    offers_workgroup_matrices(options_.workgroup_matrix_bf16_granularity) && workgroup_bf16_shaders_built();
    if (caps_.workgroup_bf16_matrices) caps_.workgroup_matrix_bf16_granularity = options_.workgroup_matrix_bf16_granularity;
    caps_.min_subgroup_size = features_.subgroup_size_control ? size_props.minSubgroupSize : subgroup.subgroupSize;
    caps_.max_subgroup_size = features_.subgroup_size_control ? size_props.maxSubgroupSize : subgroup.subgroupSize;
    caps_.max_shared_bytes = limits.maxComputeSharedMemorySize;
    caps_.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; ++i) caps_.max_workgroup_count[i] = limits.maxComputeWorkGroupCount[i];
    caps_.max_storage_buffer_range = limits.maxStorageBufferRange;
    caps_.max_texel_buffer_elements = limits.maxTexelBufferElements;
    caps_.min_storage_offset_alignment = limits.minStorageBufferOffsetAlignment;
    caps_.min_texel_offset_alignment = limits.minTexelBufferOffsetAlignment;
    caps_.min_uniform_offset_alignment = limits.minUniformBufferOffsetAlignment;
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    // VK_NV_cooperative_matrix2's limits, in the same query where its matrices are enabled (and so
    // its structure known to any layer on).
    VkPhysicalDeviceCooperativeMatrix2PropertiesNV matrix2{VKATTN_STYPE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
    if (caps_.workgroup_matrices) m3.pNext = &matrix2;
    VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props2.pNext = &m3;
    vkGetPhysicalDeviceProperties2(physical, &props2);
    caps_.max_allocation_bytes = m3.maxMemoryAllocationSize;
    if (caps_.workgroup_matrices) {
        caps_.workgroup_matrix_max_invocations = matrix2.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
        caps_.workgroup_matrix_max_dimension = matrix2.cooperativeMatrixFlexibleDimensionsMaxDimension;
        caps_.workgroup_matrix_reserved_shared = matrix2.cooperativeMatrixWorkgroupScopeReservedSharedMemory;
    }
    caps_.texel_rgba32f = texel_format_supported(physical, VK_FORMAT_R32G32B32A32_SFLOAT);
    caps_.texel_rgba16f = texel_format_supported(physical, VK_FORMAT_R16G16B16A16_SFLOAT);
    caps_.texel_r32ui = texel_format_supported(physical, VK_FORMAT_R32_UINT);
    caps_.fp16_storage = features_.storage_16bit;
    caps_.fp16_storage_supported = available_.storage_16bit;
    caps_.fp16_arithmetic = features_.float16;
    caps_.int8_arithmetic = features_.int8;
    caps_.device_memory_bytes = 0;
    for (std::uint32_t h = 0; h < memory_.memoryHeapCount; ++h)
        if (memory_.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            caps_.device_memory_bytes = std::max<std::uint64_t>(caps_.device_memory_bytes, memory_.memoryHeaps[h].size);
    // Zero-copy (tensors in memory the host maps) only where the device shares the host's memory:
    // a discrete GPU with resizable BAR also offers device-local memory the host can map, but a
    // decode step with its tensors mapped there ran 4.3x slower than with staging buffers (f16 KV,
    // 32,768 keys: 1,405 against 326 us of GPU time on an H200; docs/PERFORMANCE.md).
    for (std::uint32_t t = 0; t < memory_.memoryTypeCount && caps_.kind != DeviceKind::discrete; ++t) {
        const auto f = memory_.memoryTypes[t].propertyFlags;
        if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
            (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
            // A small BAR window is host-visible too; only call it zero-copy when the heap is large.
            const auto heap = memory_.memoryHeaps[memory_.memoryTypes[t].heapIndex].size;
            if (heap >= (std::uint64_t{1} << 30)) caps_.host_visible_device_memory = true;
        }
    }
    caps_.timestamp_period_ns = limits.timestampPeriod;
    std::memcpy(cache_uuid_.data(), props.properties.pipelineCacheUUID, VK_UUID_SIZE);
    device_id_ = props.properties.deviceID;
    driver_version_ = props.properties.driverVersion;
}

std::uint32_t Device::memory_type(std::uint32_t type_bits, VkMemoryPropertyFlags required,
                                  VkMemoryPropertyFlags preferred) const {
    for (int pass = 0; pass < 2; ++pass) {
        const VkMemoryPropertyFlags want = pass == 0 ? (required | preferred) : required;
        for (std::uint32_t t = 0; t < memory_.memoryTypeCount; ++t)
            if ((type_bits & (1u << t)) && (memory_.memoryTypes[t].propertyFlags & want) == want) return t;
    }
    throw ResourceLimit("the device has no memory type with the properties needed (flags " +
                        std::to_string(required) + ").");
}

VkMemoryPropertyFlags Device::memory_flags(std::uint32_t type) const {
    return memory_.memoryTypes[type].propertyFlags;
}

}  // namespace vkattn::vk

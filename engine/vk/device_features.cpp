#include "vk/device_features.hpp"

#include <cstring>

#include "vk/newer_extensions.hpp"
#include "vk/pipeline.hpp"

namespace vkattn::vk {
namespace {

// Whether compute shaders may require a subgroup size (the property half of subgroup size control).
bool compute_size_control(VkPhysicalDevice physical) {
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT size{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &size;
    vkGetPhysicalDeviceProperties2(physical, &props);
    return (size.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
}

// A feature structure (sType set) as the physical device fills it.
template <class Structure>
Structure queried(VkPhysicalDevice physical, Structure structure) {
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &structure;
    vkGetPhysicalDeviceFeatures2(physical, &features);
    return structure;
}

}  // namespace

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice physical) {
    std::uint32_t count = 0;
    vkEnumerateDeviceExtensionProperties(physical, nullptr, &count, nullptr);
    std::vector<VkExtensionProperties> exts(count);
    vkEnumerateDeviceExtensionProperties(physical, nullptr, &count, exts.data());
    return exts;
}

bool offers(const std::vector<VkExtensionProperties>& extensions, const char* name) {
    for (const auto& e : extensions)
        if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
}

DeviceFeatures available_features(VkPhysicalDevice physical) {
    const auto extensions = device_extensions(physical);
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    f11.pNext = &f12;
    VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f.pNext = &f11;
    vkGetPhysicalDeviceFeatures2(physical, &f);
    DeviceFeatures out;
    out.storage_16bit = f11.storageBuffer16BitAccess == VK_TRUE;
    out.uniform_storage_16bit = f11.uniformAndStorageBuffer16BitAccess == VK_TRUE;
    out.float16 = f12.shaderFloat16 == VK_TRUE;
    out.int8 = f12.shaderInt8 == VK_TRUE;
    out.int64 = f.features.shaderInt64 == VK_TRUE;
    if (offers(extensions, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME)) {
        const auto size = queried(physical, VkPhysicalDeviceSubgroupSizeControlFeaturesEXT{
                                                VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT});
        out.subgroup_size_control = size.subgroupSizeControl && size.computeFullSubgroups && compute_size_control(physical);
    }
    out.portability_subset = offers(extensions, "VK_KHR_portability_subset");
    // A device that offers the extension supports its cooperativeMatrix feature; the feature
    // structure itself is not queried (an older validation layer rejects it: newer_extensions.hpp).
    out.cooperative_matrix = offers(extensions, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME) && f12.vulkanMemoryModel == VK_TRUE &&
                             out.float16;
    out.bf16_matrices = out.cooperative_matrix && offers(extensions, VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
    if (offers(extensions, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
        out.pipeline_statistics = queried(physical, VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR{
                                                        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR})
                                      .pipelineExecutableInfo == VK_TRUE;
    }
    if (offers(extensions, VK_KHR_SHADER_MAXIMAL_RECONVERGENCE_EXTENSION_NAME)) {
        out.maximal_reconvergence =
            queried(physical, VkPhysicalDeviceShaderMaximalReconvergenceFeaturesKHR{VKATTN_STYPE_MAXIMAL_RECONVERGENCE_FEATURES_KHR})
                .shaderMaximalReconvergence == VK_TRUE;
    }
    if (offers(extensions, VK_KHR_SHADER_CLOCK_EXTENSION_NAME)) {
        out.subgroup_clock =
            queried(physical, VkPhysicalDeviceShaderClockFeaturesKHR{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR})
                .shaderSubgroupClock == VK_TRUE;
    }
    return out;
}

bool supports_bf16_matrices(VkPhysicalDevice physical) {
    const auto bf16 = queried(physical, VkPhysicalDeviceShaderBfloat16FeaturesKHR{VKATTN_STYPE_SHADER_BFLOAT16_FEATURES_KHR});
    return bf16.shaderBFloat16Type == VK_TRUE && bf16.shaderBFloat16CooperativeMatrix == VK_TRUE;
}

bool supports_flexible_matrices(VkPhysicalDevice physical) {
    return queried(physical, VkPhysicalDeviceCooperativeMatrix2FeaturesNV{VKATTN_STYPE_COOPERATIVE_MATRIX_2_FEATURES_NV})
               .cooperativeMatrixFlexibleDimensions == VK_TRUE;
}

bool runs_spirv_1_6(std::uint32_t v) {
    return VK_API_VERSION_MAJOR(v) > 1 || (VK_API_VERSION_MAJOR(v) == 1 && VK_API_VERSION_MINOR(v) >= 3);
}

namespace {
bool has_workgroup_features(const VkPhysicalDeviceCooperativeMatrix2FeaturesNV& f) {
    return f.cooperativeMatrixWorkgroupScope && f.cooperativeMatrixFlexibleDimensions && f.cooperativeMatrixReductions &&
           f.cooperativeMatrixConversions && f.cooperativeMatrixPerElementOperations && f.cooperativeMatrixTensorAddressing;
}
}  // namespace

bool supports_workgroup_matrices(VkPhysicalDevice physical) {
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(physical, &props);
    return runs_spirv_1_6(props.apiVersion) &&
           queried(physical, VkPhysicalDeviceMaintenance4Features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES}).maintenance4 &&
           has_workgroup_features(queried(physical, VkPhysicalDeviceCooperativeMatrix2FeaturesNV{VKATTN_STYPE_COOPERATIVE_MATRIX_2_FEATURES_NV}));
}

DeviceFeatures enabled_features(VkPhysicalDevice physical, const VkDeviceCreateInfo& info, std::uint32_t api_version) {
    DeviceFeatures out;
    bool size_control = false, full_subgroups = false, matrices = false, memory_model = false, reconvergence = false;
    bool executables = false, bf16_type = false, bf16_matrices = false, flexible = false, clock = false, workgroup = false;
    bool maintenance4 = false;
    if (info.pEnabledFeatures) out.int64 = info.pEnabledFeatures->shaderInt64 == VK_TRUE;
    for (auto* s = static_cast<const VkBaseInStructure*>(info.pNext); s != nullptr; s = s->pNext) {
        switch (s->sType) {
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2:
                out.int64 |= reinterpret_cast<const VkPhysicalDeviceFeatures2*>(s)->features.shaderInt64 == VK_TRUE;
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES: {
                auto* f = reinterpret_cast<const VkPhysicalDeviceVulkan11Features*>(s);
                out.storage_16bit |= f->storageBuffer16BitAccess == VK_TRUE;
                out.uniform_storage_16bit |= f->uniformAndStorageBuffer16BitAccess == VK_TRUE;
                break;
            }
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES: {
                auto* f = reinterpret_cast<const VkPhysicalDevice16BitStorageFeatures*>(s);
                out.storage_16bit |= f->storageBuffer16BitAccess == VK_TRUE;
                out.uniform_storage_16bit |= f->uniformAndStorageBuffer16BitAccess == VK_TRUE;
                break;
            }
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES: {
                auto* f = reinterpret_cast<const VkPhysicalDeviceVulkan12Features*>(s);
                out.float16 |= f->shaderFloat16 == VK_TRUE;
                out.int8 |= f->shaderInt8 == VK_TRUE;
                memory_model |= f->vulkanMemoryModel == VK_TRUE;
                break;
            }
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES:
                memory_model |= reinterpret_cast<const VkPhysicalDeviceVulkanMemoryModelFeatures*>(s)->vulkanMemoryModel == VK_TRUE;
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES: {
                auto* f = reinterpret_cast<const VkPhysicalDeviceShaderFloat16Int8Features*>(s);
                out.float16 |= f->shaderFloat16 == VK_TRUE;
                out.int8 |= f->shaderInt8 == VK_TRUE;
                break;
            }
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT: {
                auto* f = reinterpret_cast<const VkPhysicalDeviceSubgroupSizeControlFeaturesEXT*>(s);
                size_control |= f->subgroupSizeControl == VK_TRUE;
                full_subgroups |= f->computeFullSubgroups == VK_TRUE;
                break;
            }
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR:
                executables |= reinterpret_cast<const VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR*>(s)
                                   ->pipelineExecutableInfo == VK_TRUE;
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES:
                maintenance4 |= reinterpret_cast<const VkPhysicalDeviceMaintenance4Features*>(s)->maintenance4 == VK_TRUE;
                break;
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR:
                clock |= reinterpret_cast<const VkPhysicalDeviceShaderClockFeaturesKHR*>(s)->shaderSubgroupClock == VK_TRUE;
                break;
#ifdef VK_API_VERSION_1_3
            case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES: {
                auto* f = reinterpret_cast<const VkPhysicalDeviceVulkan13Features*>(s);
                size_control |= f->subgroupSizeControl == VK_TRUE;
                full_subgroups |= f->computeFullSubgroups == VK_TRUE;
                maintenance4 |= f->maintenance4 == VK_TRUE;
                break;
            }
#endif
            default:
                if (s->sType == VKATTN_STYPE_COOPERATIVE_MATRIX_FEATURES_KHR)
                    matrices |= reinterpret_cast<const VkPhysicalDeviceCooperativeMatrixFeaturesKHR*>(s)->cooperativeMatrix == VK_TRUE;
                if (s->sType == VKATTN_STYPE_SHADER_BFLOAT16_FEATURES_KHR) {
                    auto* f = reinterpret_cast<const VkPhysicalDeviceShaderBfloat16FeaturesKHR*>(s);
                    bf16_type |= f->shaderBFloat16Type == VK_TRUE;
                    bf16_matrices |= f->shaderBFloat16CooperativeMatrix == VK_TRUE;
                }
                if (s->sType == VKATTN_STYPE_COOPERATIVE_MATRIX_2_FEATURES_NV) {
                    auto* f = reinterpret_cast<const VkPhysicalDeviceCooperativeMatrix2FeaturesNV*>(s);
                    flexible |= f->cooperativeMatrixFlexibleDimensions == VK_TRUE;
                    workgroup |= has_workgroup_features(*f);
                }
                if (s->sType == VKATTN_STYPE_MAXIMAL_RECONVERGENCE_FEATURES_KHR)
                    reconvergence |= reinterpret_cast<const VkPhysicalDeviceShaderMaximalReconvergenceFeaturesKHR*>(s)
                                         ->shaderMaximalReconvergence == VK_TRUE;
                break;
        }
    }
    bool size_extension = false, matrix_extension = false, reconvergence_extension = false, executables_extension = false;
    bool bf16_extension = false, matrix2_extension = false, clock_extension = false;
    for (std::uint32_t i = 0; i < info.enabledExtensionCount; ++i) {
        const char* name = info.ppEnabledExtensionNames[i];
        if (std::strcmp(name, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) == 0) size_extension = true;
        if (std::strcmp(name, "VK_KHR_portability_subset") == 0) out.portability_subset = true;
        if (std::strcmp(name, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0) matrix_extension = true;
        if (std::strcmp(name, VK_KHR_SHADER_MAXIMAL_RECONVERGENCE_EXTENSION_NAME) == 0) reconvergence_extension = true;
        if (std::strcmp(name, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) == 0) executables_extension = true;
        if (std::strcmp(name, VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME) == 0) bf16_extension = true;
        if (std::strcmp(name, VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME) == 0) matrix2_extension = true;
        if (std::strcmp(name, VK_KHR_SHADER_CLOCK_EXTENSION_NAME) == 0) clock_extension = true;
    }
    out.pipeline_statistics = executables_extension && executables;
    out.subgroup_clock = clock_extension && clock;
    out.maximal_reconvergence = reconvergence_extension && reconvergence;
    out.cooperative_matrix = matrix_extension && matrices && memory_model && out.float16;
    out.bf16_matrices = out.cooperative_matrix && bf16_extension && bf16_type && bf16_matrices;
    out.flexible_matrices = out.cooperative_matrix && matrix2_extension && flexible;
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(physical, &props);
    out.workgroup_matrices = out.flexible_matrices && workgroup && maintenance4 && runs_spirv_1_6(api_version) &&
                             runs_spirv_1_6(props.apiVersion);
    // Core in Vulkan 1.3 (for an instance and a device of 1.3), whichever structure enabled it.
    auto at_least_1_3 = [](std::uint32_t v) {
        return VK_API_VERSION_MAJOR(v) > 1 || (VK_API_VERSION_MAJOR(v) == 1 && VK_API_VERSION_MINOR(v) >= 3);
    };
    const bool core_13 = at_least_1_3(api_version) && at_least_1_3(props.apiVersion);
    out.subgroup_size_control = size_control && full_subgroups && (size_extension || core_13) &&
                                compute_size_control(physical);
    return out;
}

std::vector<std::string> features_not_enabled(const DeviceFeatures& available, const DeviceFeatures& enabled) {
    std::vector<std::string> out;
    auto note = [&](bool offered, bool on, const char* what) {
        if (offered && !on) out.emplace_back(what);
    };
    note(available.storage_16bit, enabled.storage_16bit,
         "storageBuffer16BitAccess (Vulkan 1.1): f16 tensors, caches and layers are refused");
    note(available.subgroup_size_control, enabled.subgroup_size_control,
         "subgroupSizeControl + computeFullSubgroups (VK_EXT_subgroup_size_control): the fused kernels run only "
         "where the driver's default subgroup size is the one their layout needs");
    note(available.cooperative_matrix, enabled.cooperative_matrix,
         "cooperativeMatrix (VK_KHR_cooperative_matrix) with vulkanMemoryModel and shaderFloat16: the cooperative-matrix "
         "kernels run their portable implementation, not the matrix units");
    note(available.bf16_matrices && enabled.cooperative_matrix && bf16_unit_shaders_built(), enabled.bf16_matrices,
         "shaderBFloat16Type + shaderBFloat16CooperativeMatrix (VK_KHR_shader_bfloat16): bf16 storage does not multiply "
         "on the matrix units");
    note(available.workgroup_matrices && enabled.cooperative_matrix && workgroup_matrix_shaders_built(), enabled.workgroup_matrices,
         "VK_NV_cooperative_matrix2's workgroup scope, flexible dimensions, tensor addressing, reductions, conversions and "
         "element operations, on an instance of Vulkan 1.3: the forward's workgroup-matrix kernel is refused");
    note(available.maximal_reconvergence, enabled.maximal_reconvergence,
         "shaderMaximalReconvergence (VK_KHR_shader_maximal_reconvergence): subgroup operations after a per-lane branch "
         "rely on the driver reconverging there, which the core rules do not promise");
    return out;
}

}  // namespace vkattn::vk

// The caller's VkDeviceCreateInfo read for what it enabled (vk::enabled_features): every structure
// that can carry a feature vkattn uses, each feature with its extension where it has one.
#include "support/catch.hpp"

#include <vulkan/vulkan.h>

#include "support/own_vulkan.hpp"
#include "vk/device_features.hpp"
#include "vk/newer_extensions.hpp"

using namespace vkattn;
using namespace vkattn::test;

TEST_CASE("the caller's device: enabled features are read from every structure of the create info", "[gpu][vulkan]") {
    OwnVulkan own;  // for its physical device
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(own.physical, &props);
    const bool device_13 = VK_API_VERSION_MINOR(props.apiVersion) >= 3;
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    const vk::DeviceFeatures none = vk::enabled_features(own.physical, info, VK_API_VERSION_1_2);
    CHECK_FALSE((none.storage_16bit || none.float16 || none.int8 || none.int64 || none.subgroup_size_control));

    VkPhysicalDeviceFeatures core{};
    core.shaderInt64 = VK_TRUE;
    info.pEnabledFeatures = &core;
    CHECK(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).int64);
    info.pEnabledFeatures = nullptr;

    VkPhysicalDevice16BitStorageFeatures storage{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    storage.storageBuffer16BitAccess = VK_TRUE;
    VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    f16.shaderFloat16 = VK_TRUE;
    storage.pNext = &f16;
    info.pNext = &storage;
    const vk::DeviceFeatures promoted = vk::enabled_features(own.physical, info, VK_API_VERSION_1_2);
    CHECK((promoted.storage_16bit && promoted.float16 && !promoted.int8));

    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    v12.shaderInt8 = VK_TRUE;
    VkPhysicalDeviceVulkan11Features v11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    v11.storageBuffer16BitAccess = VK_TRUE;
    v11.pNext = &v12;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.features.shaderInt64 = VK_TRUE;
    f2.pNext = &v11;
    info.pNext = &f2;
    const vk::DeviceFeatures core12 = vk::enabled_features(own.physical, info, VK_API_VERSION_1_2);
    CHECK((core12.storage_16bit && core12.int8 && core12.int64 && !core12.float16));

    // Subgroup size control: the structure alone counts only with the extension, or on Vulkan 1.3
    // (instance and device), and only where the device offers it for compute shaders.
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    size.subgroupSizeControl = VK_TRUE;
    size.computeFullSubgroups = VK_TRUE;
    info.pNext = &size;
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).subgroup_size_control);
    CHECK(vk::enabled_features(own.physical, info, VK_API_VERSION_1_3).subgroup_size_control ==
          (device_13 && own.size_control_offered));
    const char* extension = VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME;
    info.enabledExtensionCount = 1;
    info.ppEnabledExtensionNames = &extension;
    CHECK(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).subgroup_size_control == own.size_control_offered);
    size.computeFullSubgroups = VK_FALSE;  // both halves are needed
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).subgroup_size_control);
    // Cooperative matrices (the matrix units' kernels): the extension, its feature structure, the
    // Vulkan memory model and f16 arithmetic, all four; read from the create info whatever the
    // device offers.
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR matrices{VKATTN_STYPE_COOPERATIVE_MATRIX_FEATURES_KHR};
    matrices.cooperativeMatrix = VK_TRUE;
    VkPhysicalDeviceVulkanMemoryModelFeatures model{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    model.vulkanMemoryModel = VK_TRUE;
    VkPhysicalDeviceShaderFloat16Int8Features half{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    half.shaderFloat16 = VK_TRUE;
    model.pNext = &half;
    matrices.pNext = &model;
    info.pNext = &matrices;
    const char* matrix_extension = VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME;
    info.ppEnabledExtensionNames = &matrix_extension;
    CHECK(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).cooperative_matrix);
    matrices.pNext = &half;  // without the memory model its shaders cannot run
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).cooperative_matrix);
    model.pNext = nullptr;  // nor without f16
    matrices.pNext = &model;
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).cooperative_matrix);
    model.pNext = &half;
    // bf16 operands on them: VK_KHR_shader_bfloat16 and both its features (bf16 scalars and bf16
    // matrices), with the cooperative matrices.
    VkPhysicalDeviceShaderBfloat16FeaturesKHR bf16{VKATTN_STYPE_SHADER_BFLOAT16_FEATURES_KHR};
    bf16.shaderBFloat16Type = bf16.shaderBFloat16CooperativeMatrix = VK_TRUE;
    bf16.pNext = &matrices;
    info.pNext = &bf16;
    const char* matrix_and_bf16[] = {VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME, VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME};
    info.ppEnabledExtensionNames = matrix_and_bf16;
    info.enabledExtensionCount = 2;
    const vk::DeviceFeatures with_bf16 = vk::enabled_features(own.physical, info, VK_API_VERSION_1_2);
    CHECK((with_bf16.cooperative_matrix && with_bf16.bf16_matrices));
    bf16.shaderBFloat16CooperativeMatrix = VK_FALSE;  // bf16 scalars alone: not on the matrices
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).bf16_matrices);
    bf16.shaderBFloat16CooperativeMatrix = VK_TRUE;
    info.enabledExtensionCount = 1;  // the structure without its extension
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).bf16_matrices);
    matrices.cooperativeMatrix = VK_FALSE;  // nor without the cooperative matrices
    info.enabledExtensionCount = 2;
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).bf16_matrices);
    matrices.cooperativeMatrix = VK_TRUE;
    // Flexible dimensions (the kernels' 16 × 16 × 16 matrices as multiples of a device's smaller
    // shapes): VK_NV_cooperative_matrix2 and its cooperativeMatrixFlexibleDimensions, with the
    // cooperative matrices.
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV matrix2{VKATTN_STYPE_COOPERATIVE_MATRIX_2_FEATURES_NV};
    matrix2.cooperativeMatrixFlexibleDimensions = VK_TRUE;
    matrix2.pNext = &matrices;
    info.pNext = &matrix2;
    const char* matrix_and_matrix2[] = {VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME, VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME};
    info.ppEnabledExtensionNames = matrix_and_matrix2;
    const vk::DeviceFeatures flexible = vk::enabled_features(own.physical, info, VK_API_VERSION_1_2);
    CHECK((flexible.cooperative_matrix && flexible.flexible_matrices && !flexible.bf16_matrices));
    info.enabledExtensionCount = 1;  // the structure without its extension
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).flexible_matrices);
    info.enabledExtensionCount = 2;
    matrix2.cooperativeMatrixFlexibleDimensions = VK_FALSE;  // the extension without the feature
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).flexible_matrices);
    matrix2.cooperativeMatrixFlexibleDimensions = VK_TRUE;
    matrices.cooperativeMatrix = VK_FALSE;  // nor without the cooperative matrices
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).flexible_matrices);
    matrices.cooperativeMatrix = VK_TRUE;
    info.pNext = &matrices;
    info.ppEnabledExtensionNames = &matrix_extension;
    info.enabledExtensionCount = 0;  // nor without the extension
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).cooperative_matrix);

    // Maximal reconvergence (every module then gets MaximallyReconvergesKHR) and the pipelines'
    // statistics: each its extension and its feature structure, both.
    VkPhysicalDeviceShaderMaximalReconvergenceFeaturesKHR reconvergence{VKATTN_STYPE_MAXIMAL_RECONVERGENCE_FEATURES_KHR};
    reconvergence.shaderMaximalReconvergence = VK_TRUE;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executables{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    executables.pipelineExecutableInfo = VK_TRUE;
    reconvergence.pNext = &executables;
    info.pNext = &reconvergence;
    const char* both[] = {VK_KHR_SHADER_MAXIMAL_RECONVERGENCE_EXTENSION_NAME, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME};
    info.enabledExtensionCount = 2;
    info.ppEnabledExtensionNames = both;
    const vk::DeviceFeatures newer = vk::enabled_features(own.physical, info, VK_API_VERSION_1_2);
    CHECK((newer.maximal_reconvergence && newer.pipeline_statistics && !newer.cooperative_matrix));
    info.enabledExtensionCount = 1;  // the statistics' extension missing
    const vk::DeviceFeatures reconverging = vk::enabled_features(own.physical, info, VK_API_VERSION_1_2);
    CHECK((reconverging.maximal_reconvergence && !reconverging.pipeline_statistics));
    reconvergence.shaderMaximalReconvergence = VK_FALSE;  // the extension without its feature
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).maximal_reconvergence);

    // The subgroup clock (the benchmarks' clock probe): VK_KHR_shader_clock and its shaderSubgroupClock.
    VkPhysicalDeviceShaderClockFeaturesKHR clock{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
    clock.shaderSubgroupClock = VK_TRUE;
    info.pNext = &clock;
    const char* clock_extension = VK_KHR_SHADER_CLOCK_EXTENSION_NAME;
    info.enabledExtensionCount = 1;
    info.ppEnabledExtensionNames = &clock_extension;
    CHECK(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).subgroup_clock);
    info.enabledExtensionCount = 0;  // the structure without its extension
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).subgroup_clock);
    info.enabledExtensionCount = 1;
    clock.shaderSubgroupClock = VK_FALSE;  // the extension without the subgroup's clock
    CHECK_FALSE(vk::enabled_features(own.physical, info, VK_API_VERSION_1_2).subgroup_clock);
}

// Declarations of the device extensions vkattn reads that are newer than the oldest Vulkan headers it
// builds with (Debian 12's 1.3.239): VK_KHR_cooperative_matrix's properties query and feature,
// VK_KHR_shader_bfloat16's feature, VK_NV_cooperative_matrix2's flexible dimensions, and the name of
// VK_EXT_shader_float8, copied from the Vulkan registry (vk.xml) with
// their enum values. Newer headers define them, and these are skipped.
#pragma once

#include <cstdint>

#include <vulkan/vulkan.h>

#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"
typedef enum VkComponentTypeKHR {
    VK_COMPONENT_TYPE_FLOAT16_KHR = 0,
    VK_COMPONENT_TYPE_FLOAT32_KHR = 1,
    VK_COMPONENT_TYPE_FLOAT64_KHR = 2,
    VK_COMPONENT_TYPE_SINT8_KHR = 3,
    VK_COMPONENT_TYPE_SINT16_KHR = 4,
    VK_COMPONENT_TYPE_SINT32_KHR = 5,
    VK_COMPONENT_TYPE_SINT64_KHR = 6,
    VK_COMPONENT_TYPE_UINT8_KHR = 7,
    VK_COMPONENT_TYPE_UINT16_KHR = 8,
    VK_COMPONENT_TYPE_UINT32_KHR = 9,
    VK_COMPONENT_TYPE_UINT64_KHR = 10,
    VK_COMPONENT_TYPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkComponentTypeKHR;
typedef enum VkScopeKHR {
    VK_SCOPE_DEVICE_KHR = 1,
    VK_SCOPE_WORKGROUP_KHR = 2,
    VK_SCOPE_SUBGROUP_KHR = 3,
    VK_SCOPE_QUEUE_FAMILY_KHR = 5,
    VK_SCOPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkScopeKHR;
typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void* pNext;
    uint32_t MSize;
    uint32_t NSize;
    uint32_t KSize;
    VkComponentTypeKHR AType;
    VkComponentTypeKHR BType;
    VkComponentTypeKHR CType;
    VkComponentTypeKHR ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeKHR scope;
} VkCooperativeMatrixPropertiesKHR;
typedef VkResult(VKAPI_PTR* PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice physicalDevice, uint32_t* pPropertyCount, VkCooperativeMatrixPropertiesKHR* pProperties);
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void* pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
#define VKATTN_STYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR static_cast<VkStructureType>(1000506001)
#define VKATTN_STYPE_COOPERATIVE_MATRIX_FEATURES_KHR static_cast<VkStructureType>(1000506000)
#else
#define VKATTN_STYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
#define VKATTN_STYPE_COOPERATIVE_MATRIX_FEATURES_KHR VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
#endif
// The first Vulkan headers (and so Khronos validation layer) that know VK_KHR_cooperative_matrix: an
// older layer reports its feature structure in a pNext chain as an error.
constexpr std::uint32_t kCooperativeMatrixHeaderVersion = VK_MAKE_API_VERSION(0, 1, 3, 255);

// VK_KHR_shader_maximal_reconvergence (Vulkan 1.3.277): its feature structure, and the first headers
// (and so validation layer) that know it.
#ifndef VK_KHR_shader_maximal_reconvergence
#define VK_KHR_SHADER_MAXIMAL_RECONVERGENCE_EXTENSION_NAME "VK_KHR_shader_maximal_reconvergence"
typedef struct VkPhysicalDeviceShaderMaximalReconvergenceFeaturesKHR {
    VkStructureType sType;
    void* pNext;
    VkBool32 shaderMaximalReconvergence;
} VkPhysicalDeviceShaderMaximalReconvergenceFeaturesKHR;
#define VKATTN_STYPE_MAXIMAL_RECONVERGENCE_FEATURES_KHR static_cast<VkStructureType>(1000434000)
#else
#define VKATTN_STYPE_MAXIMAL_RECONVERGENCE_FEATURES_KHR VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_MAXIMAL_RECONVERGENCE_FEATURES_KHR
#endif
constexpr std::uint32_t kMaximalReconvergenceHeaderVersion = VK_MAKE_API_VERSION(0, 1, 3, 277);

// Component types added by later extensions, as plain values (the enum of older headers lacks them).
constexpr int kVkComponentTypeBfloat16 = 1000141000;    // VK_KHR_shader_bfloat16
constexpr int kVkComponentTypeSint8PackedNv = 1000491000;  // VK_NV_cooperative_vector
constexpr int kVkComponentTypeUint8PackedNv = 1000491001;
constexpr int kVkComponentTypeFloat8E4M3 = 1000491002;  // VK_EXT_shader_float8 (first VK_NV_cooperative_vector)
constexpr int kVkComponentTypeFloat8E5M2 = 1000491003;

// VK_KHR_shader_bfloat16 (Vulkan 1.4.311): its feature structure (bf16 operands on the matrix
// units), and the first validation layer that takes it: 1.4.311's knows the structure, but its
// checks of bf16 cooperative matrices in SPIR-V were fixed only in 1.4.320 ("layers: Fix BFloat16
// and Float8", June 2025), and a false message fails the tests.
#ifndef VK_KHR_shader_bfloat16
#define VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME "VK_KHR_shader_bfloat16"
typedef struct VkPhysicalDeviceShaderBfloat16FeaturesKHR {
    VkStructureType sType;
    void* pNext;
    VkBool32 shaderBFloat16Type;
    VkBool32 shaderBFloat16DotProduct;
    VkBool32 shaderBFloat16CooperativeMatrix;
} VkPhysicalDeviceShaderBfloat16FeaturesKHR;
#define VKATTN_STYPE_SHADER_BFLOAT16_FEATURES_KHR static_cast<VkStructureType>(1000141000)
#else
#define VKATTN_STYPE_SHADER_BFLOAT16_FEATURES_KHR VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR
#endif
constexpr std::uint32_t kBfloat16HeaderVersion = VK_MAKE_API_VERSION(0, 1, 4, 320);
#ifndef VK_EXT_shader_float8
#define VK_EXT_SHADER_FLOAT8_EXTENSION_NAME "VK_EXT_shader_float8"
#endif

// VK_NV_cooperative_matrix2 (Vulkan 1.3.301): only its flexible dimensions are read, the feature
// and the shapes. A device that offers them takes any multiple of a shape's granularities, up to
// its maximal dimension, as a cooperative matrix at that scope: Mesa's lavapipe (26.1) lists only
// 8×8×8 shapes and so runs the kernels' 16×16×16 matrices (docs/LAVAPIPE.md, "The matrix units on a
// CPU"). The feature structure is chained only where no validation layer older than it is on.
#ifndef VK_NV_cooperative_matrix2
#define VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME "VK_NV_cooperative_matrix2"
typedef struct VkPhysicalDeviceCooperativeMatrix2FeaturesNV {
    VkStructureType sType;
    void* pNext;
    VkBool32 cooperativeMatrixWorkgroupScope;
    VkBool32 cooperativeMatrixFlexibleDimensions;
    VkBool32 cooperativeMatrixReductions;
    VkBool32 cooperativeMatrixConversions;
    VkBool32 cooperativeMatrixPerElementOperations;
    VkBool32 cooperativeMatrixTensorAddressing;
    VkBool32 cooperativeMatrixBlockLoads;
} VkPhysicalDeviceCooperativeMatrix2FeaturesNV;
typedef struct VkCooperativeMatrixFlexibleDimensionsPropertiesNV {
    VkStructureType sType;
    void* pNext;
    uint32_t MGranularity;
    uint32_t NGranularity;
    uint32_t KGranularity;
    VkComponentTypeKHR AType;
    VkComponentTypeKHR BType;
    VkComponentTypeKHR CType;
    VkComponentTypeKHR ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeKHR scope;
    uint32_t workgroupInvocations;
} VkCooperativeMatrixFlexibleDimensionsPropertiesNV;
typedef struct VkPhysicalDeviceCooperativeMatrix2PropertiesNV {
    VkStructureType sType;
    void* pNext;
    uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
    uint32_t cooperativeMatrixFlexibleDimensionsMaxDimension;
    uint32_t cooperativeMatrixWorkgroupScopeReservedSharedMemory;
} VkPhysicalDeviceCooperativeMatrix2PropertiesNV;
typedef VkResult(VKAPI_PTR* PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)(
    VkPhysicalDevice physicalDevice, uint32_t* pPropertyCount, VkCooperativeMatrixFlexibleDimensionsPropertiesNV* pProperties);
#define VKATTN_STYPE_COOPERATIVE_MATRIX_2_FEATURES_NV static_cast<VkStructureType>(1000593000)
#define VKATTN_STYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV static_cast<VkStructureType>(1000593001)
#define VKATTN_STYPE_COOPERATIVE_MATRIX_2_PROPERTIES_NV static_cast<VkStructureType>(1000593002)
#else
#define VKATTN_STYPE_COOPERATIVE_MATRIX_2_FEATURES_NV VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV
#define VKATTN_STYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV \
    VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV
#define VKATTN_STYPE_COOPERATIVE_MATRIX_2_PROPERTIES_NV VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV
#endif
constexpr std::uint32_t kCooperativeMatrix2HeaderVersion = VK_MAKE_API_VERSION(0, 1, 3, 301);

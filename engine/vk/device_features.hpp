// The optional device features vkattn uses: what a physical device offers, what a logical device was
// created with (vkattn's own, or the caller's: Vulkan cannot be asked afterwards, so the caller's
// VkDeviceCreateInfo is read), and the chain that enables them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace vkattn::vk {

struct DeviceFeatures {
    bool storage_16bit = false;          // storageBuffer16BitAccess: f16 tensors
    bool uniform_storage_16bit = false;  // uniformAndStorageBuffer16BitAccess
    bool float16 = false;                // shaderFloat16
    bool int8 = false;                   // shaderInt8
    bool int64 = false;                  // shaderInt64
    // subgroupSizeControl and computeFullSubgroups, with VK_EXT_subgroup_size_control or Vulkan 1.3,
    // for compute shaders: the fused kernel may then require the subgroup size its layout is built for.
    bool subgroup_size_control = false;
    bool portability_subset = false;  // VK_KHR_portability_subset (MoltenVK): enabled whenever offered
    // VK_KHR_cooperative_matrix's cooperativeMatrix with vulkanMemoryModel and shaderFloat16 (the
    // units' shaders use the Vulkan memory model and f16 matrices): the matrix units' kernels (issue #33). Whether a shape they take is
    // offered is DeviceInfo::cooperative_matrix's to say.
    bool cooperative_matrix = false;
    // VK_KHR_shader_bfloat16's shaderBFloat16Type and shaderBFloat16CooperativeMatrix, with
    // cooperative_matrix: bf16 operands on the matrix units (the cooperative-matrix kernels' bf16
    // builds). Offered: the extension with cooperative_matrix (vk::Device confirms the features by a
    // query, which a validation layer older than the extension would reject, before it enables them).
    bool bf16_matrices = false;
    // VK_NV_cooperative_matrix2's cooperativeMatrixFlexibleDimensions, with cooperative_matrix: the
    // kernels' 16×16×16 matrices as multiples of a flexible shape's granularities, where the device
    // lists no 16×16×16 shape of its own (lavapipe: 8×8×8). Offered: known only by a query
    // (supports_flexible_matrices), which a validation layer older than the extension rejects.
    bool flexible_matrices = false;
    // VK_NV_cooperative_matrix2's workgroup scope, flexible dimensions, tensor addressing,
    // reductions, conversions and element operations, with cooperative_matrix, on a device and an
    // instance of Vulkan 1.3 (the kernel is SPIR-V 1.6) with maintenance4 (its LocalSizeId): the workgroup-matrix kernel
    // (shaders/flash_cm2.comp). Offered: known only by a query (supports_workgroup_matrices), which a
    // validation layer older than the extension rejects.
    bool workgroup_matrices = false;
    // VK_KHR_shader_maximal_reconvergence's shaderMaximalReconvergence: every pipeline's SPIR-V then
    // gets MaximallyReconvergesKHR (vk/spirv_patch.hpp), so subgroup operations after a per-lane
    // branch see the whole subgroup.
    bool maximal_reconvergence = false;
    // VK_KHR_pipeline_executable_properties's pipelineExecutableInfo: the compiler's statistics per
    // kernel (vkattn/kernel_statistics.hpp); enabled only when a context asks for them.
    bool pipeline_statistics = false;
    // VK_KHR_shader_clock's shaderSubgroupClock: a shader may read its subgroup's clock (the SM's
    // cycles on NVIDIA), which the benchmarks' clock probe (vkattn/testing/clock_probe.hpp) reads to
    // say at what clock a timed run ran. Enabled wherever offered; no kernel of the engine reads it.
    bool subgroup_clock = false;
};

// What the physical device offers.
DeviceFeatures available_features(VkPhysicalDevice physical);

// Whether it supports bf16 scalars and bf16 cooperative matrices in shaders (the features
// VK_KHR_shader_bfloat16 makes optional; the extension offered): ask only where no validation layer
// older than the structure is on (newer_extensions.hpp's kBfloat16HeaderVersion).
bool supports_bf16_matrices(VkPhysicalDevice physical);

// Whether it supports VK_NV_cooperative_matrix2's flexible dimensions (the extension offered): ask
// only where no validation layer older than the structure is on (kCooperativeMatrix2HeaderVersion).
bool supports_flexible_matrices(VkPhysicalDevice physical);

// Whether it supports what the workgroup-matrix kernel uses of VK_NV_cooperative_matrix2 (workgroup
// scope, flexible dimensions, tensor addressing, reductions, conversions, element operations), Vulkan
// 1.3 (SPIR-V 1.6) and maintenance4 (SPIR-V 1.6's LocalSizeId); ask as supports_flexible_matrices.
bool supports_workgroup_matrices(VkPhysicalDevice physical);

// Whether Vulkan `version` (an instance's or a device's) runs SPIR-V 1.6 modules: 1.3 or later.
bool runs_spirv_1_6(std::uint32_t version);

// The device extensions the physical device offers, and whether `name` is among them.
std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice physical);
bool offers(const std::vector<VkExtensionProperties>& extensions, const char* name);

// What a device created with `info` has enabled (pEnabledFeatures, the feature structures of its
// pNext chain, its extensions); `api_version` is the instance's, which decides whether Vulkan
// 1.3's core subgroup size control counts.
DeviceFeatures enabled_features(VkPhysicalDevice physical, const VkDeviceCreateInfo& info, std::uint32_t api_version);

// The features a device offers but whose creator did not enable, each with what vkattn loses.
std::vector<std::string> features_not_enabled(const DeviceFeatures& available, const DeviceFeatures& enabled);

}  // namespace vkattn::vk

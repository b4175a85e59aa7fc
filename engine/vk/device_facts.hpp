// What a physical device tells, beyond the core limits, that decides how work is cut for it: its
// compute units (where a vendor extension gives them), subgroup size control, the cooperative-matrix
// shapes and types it multiplies, bf16 and fp8 shader types, timestamps. Read for `vk-attn devices`
// (DeviceInfo) and for the tuning (DeviceCaps::compute_units).
#pragma once

#include <cstdint>
#include <string>

#include <vulkan/vulkan.h>

#include "vk/device_caps.hpp"
#include "vk/device_features.hpp"
#include "vkattn/context.hpp"

namespace vkattn::vk {

struct ComputeUnits {
    std::uint32_t count = 0;  // 0: no extension tells
    std::string source;       // the extension that told
};

// VK_NV_shader_sm_builtins' SM count, VK_AMD_shader_core_properties2's active compute units, or
// VK_ARM_shader_core_builtins' shader cores, whichever the device offers.
ComputeUnits compute_units(VkPhysicalDevice physical);

// Which feature structures newer than the oldest headers vkattn builds with may be chained into a
// query: those no validation layer on predates (an older one reports them as errors); none for a
// caller's instance, whose layers are unknown.
struct NewerQueries {
    bool bf16 = false;     // VK_KHR_shader_bfloat16's (kBfloat16HeaderVersion)
    bool matrix2 = false;  // VK_NV_cooperative_matrix2's (kCooperativeMatrix2HeaderVersion)
    bool spirv_1_6 = false;  // the instance is of Vulkan 1.3: SPIR-V 1.6 kernels may run (the workgroup-matrix kernel)
};

// Fills `info`'s tuning facts (the fields after `rejected` in DeviceInfo). `instance` resolves
// vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR. With `ask.bf16`, bf16_matrix_units says what
// the driver supports, else it assumes the offered extension's; with `ask.matrix2`, the shapes
// include the flexible ones where the device supports flexible dimensions.
void describe_tuning_facts(VkInstance instance, VkPhysicalDevice physical, DeviceInfo& info, NewerQueries ask);

// VK_NV_cooperative_matrix2's flexible shapes (CooperativeMatrixShape::flexible), for a device that
// offers the extension and supports its cooperativeMatrixFlexibleDimensions (queried with
// supports_flexible_matrices, or known from the create info of a caller's device that enabled it).
std::vector<CooperativeMatrixShape> flexible_matrix_shapes(VkInstance instance, VkPhysicalDevice physical);

// Whether the shapes include the one the cooperative-matrix kernels are built for: 16×16×16,
// f16 × f16 + f32 → f32, subgroup scope, not saturating (common/coopmat.glsl): a shape of its own,
// or with `flexible` a flexible shape whose granularities divide 16.
bool takes_f16_matrices(const std::vector<CooperativeMatrixShape>& shapes, bool flexible = true);
// The units' tile for the kernels' f16 products (DeviceCaps::matrix_tile): 16 × 16 where
// takes_f16_matrices; else the parts of it a shape offers, f16 × f16 + f32 → f32 at subgroup scope,
// 16 deep, M and N 8 or 16 (the most elements; with `flexible`, flexible shapes whose granularities
// divide them too). `forced` found: that tile alone, where the shapes take it
// ($VKATTN_MATRIX_TILE, so that the parts run where 16 × 16 would). {0, 0}: none.
MatrixTile f16_matrix_tile(const std::vector<CooperativeMatrixShape>& shapes, bool flexible = true, MatrixTile forced = {});
// $VKATTN_MATRIX_TILE ("8x8", "8x16", "16x8", "16x16"), or {0, 0} where unset; InvalidArgument naming
// it where it is none of those.
MatrixTile forced_matrix_tile();
// The same with bf16 × bf16 + f32 (the kernels' bf16 builds).
bool takes_bf16_matrices(const std::vector<CooperativeMatrixShape>& shapes, bool flexible = true);
// Whether the kernels' shapes come only from flexible ones: the device must then enable
// VK_NV_cooperative_matrix2's cooperativeMatrixFlexibleDimensions for them.
// `tile`: the f16 tile the device will use (f16_matrix_tile's).
bool matrices_need_flexible_dimensions(const std::vector<CooperativeMatrixShape>& shapes, MatrixTile tile);

// Why bf16 matrices are off where the driver lacks VK_KHR_shader_bfloat16's two features.
inline constexpr const char* kNoBf16MatrixFeatures =
    "the device does not support shaderBFloat16Type and shaderBFloat16CooperativeMatrix";

// DeviceInfo::matrix_units and matrix_units_off for a device made with `enabled` of the `available`
// features: the units run the cooperative-matrix kernels where the shape is offered, the feature is
// enabled (else `why_not_enabled`) and this build has their shaders; and bf16_matrix_units (_off)
// alike (`why_bf16_not_enabled`).
// workgroup_matrices (_off) alike (`why_workgroup_not_enabled`).
void describe_matrix_units(DeviceInfo& info, const DeviceFeatures& available, const DeviceFeatures& enabled,
                           const std::string& why_not_enabled, const std::string& why_bf16_not_enabled,
                           const std::string& why_workgroup_not_enabled = "");

// The workgroup sizes for which `shapes` offer a flexible `operands` x `operands` + f32
// workgroup-scope shape (VK_NV_cooperative_matrix2; operands "f16" or "bf16"), each with its
// granularities (the finest where several are listed): index i for 2^i invocations. The kernels
// check their matrices against them (attention/workgroup_matrices.hpp).
WorkgroupGranularities workgroup_matrix_granularities(const std::vector<CooperativeMatrixShape>& shapes,
                                                      const std::string& operands = "f16");

}  // namespace vkattn::vk

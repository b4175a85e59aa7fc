// Compute pipelines: one Kernel per (shader, specialization constants), built from embedded SPIR-V
// with its descriptor layout reflected from the SPIR-V, through a pipeline cache persisted on disk.
#pragma once

#include <compare>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vk/handle.hpp"
#include "vk/pipeline_statistics.hpp"
#include "vk/spirv_reflect.hpp"

namespace vkattn::vk {

class Device;

// The embedded SPIR-V of a shader variant by name (e.g. "bmm_texel_f32"); throws when absent.
std::span<const std::uint32_t> embedded_shader(const std::string& name);
// Whether this build embeds the shader.
bool has_embedded_shader(const std::string& name);
// Whether this build has the matrix units' shaders (built only where their toolchain is:
// cmake/VkattnShaders.cmake's VKATTN_COOPMAT_UNITS).
bool matrix_unit_shaders_built();
// Whether it has their build for tiles of parts (CM_PARTS: built with them; DeviceCaps::matrix_tile).
bool matrix_part_shaders_built();
// Whether it has their bf16 builds too (VKATTN_HAVE_BF16_UNITS: a glslang that compiles GL_EXT_bfloat16).
bool bf16_unit_shaders_built();
// Whether it has the workgroup-matrix kernel (VKATTN_HAVE_WORKGROUP_MATRICES: shaders/flash_cm2.comp,
// a glslang that compiles GL_NV_cooperative_matrix2).
bool workgroup_matrix_shaders_built();
// Whether it has that kernel's bf16 builds (both of the above).
bool workgroup_bf16_shaders_built();

struct SpecConstant {
    std::uint32_t id = 0;
    std::uint32_t value = 0;  // every vkattn specialization constant is a 32-bit uint/int/bool
    auto operator<=>(const SpecConstant&) const = default;
};

struct KernelKey {
    std::string shader;
    std::vector<SpecConstant> constants;
    std::uint32_t required_subgroup_size = 0;  // 0: the driver's choice; else required, full subgroups
    auto operator<=>(const KernelKey&) const = default;
};

class Kernel {
public:
    Kernel(const Device& device, VkPipelineCache cache, const KernelKey& key);
    VkPipeline pipeline() const { return pipeline_.get(); }
    VkPipelineLayout layout() const { return layout_.get(); }
    VkDescriptorSetLayout set_layout() const { return set_layout_.get(); }
    const std::vector<ReflectedBinding>& bindings() const { return bindings_; }
    const std::string& name() const { return name_; }
    // The driver's statistics, where the device captures them (DeviceCaps::kernel_statistics).
    const std::vector<KernelStatistics>& statistics() const { return statistics_; }

private:
    std::string name_;
    std::vector<KernelStatistics> statistics_;
    std::vector<ReflectedBinding> bindings_;
    Handle<VkShaderModule> module_;
    Handle<VkDescriptorSetLayout> set_layout_;
    Handle<VkPipelineLayout> layout_;
    Handle<VkPipeline> pipeline_;
};

// Owns the VkPipelineCache (loaded from and saved to `file` unless it is empty) and the kernels.
class KernelCache {
public:
    KernelCache(const Device& device, std::filesystem::path file);
    ~KernelCache();
    KernelCache(const KernelCache&) = delete;
    KernelCache& operator=(const KernelCache&) = delete;

    const Kernel& get(const KernelKey& key);
    void save() const;  // writes the cache file atomically; errors are ignored (a cache is optional)
    // Every kernel built so far, in key order.
    std::vector<const Kernel*> built();

private:
    const Device* device_;
    std::filesystem::path file_;
    Handle<VkPipelineCache> cache_;
    std::mutex mutex_;
    std::map<KernelKey, std::unique_ptr<Kernel>> kernels_;
};

}  // namespace vkattn::vk

// The logical device: one compute queue, the optional features vkattn uses (16-bit storage,
// subgroup size control), the capabilities the tuning function reads, and memory-type selection.
// vkattn creates its own, or adopts the caller's (vkattn/vulkan.hpp) and never destroys it.
#pragma once

#include <array>
#include <cstdint>

#include <vulkan/vulkan.h>

#include "vk/device_caps.hpp"
#include "vk/device_features.hpp"
#include "vk/handle.hpp"

namespace vkattn::vk {

// What a device is made with beyond the physical device's own features.
struct DeviceOptions {
    // Whether feature structures newer than the oldest headers vkattn builds with may be chained at
    // creation: false while a validation layer older than them is on (it reports them as errors).
    bool newer_structures = true;
    // The tile of f16 × f16 + f32 products at subgroup scope the matrix units take for the
    // kernels' 16×16×16 ones (the cooperative-matrix shapes DeviceInfo lists; vk::f16_matrix_tile):
    // 16 × 16, or parts of it; {0, 0}: none.
    MatrixTile f16_matrix_tile{};
    // Whether VK_KHR_shader_bfloat16's feature structure may be chained (false while a validation
    // layer older than it is on), and whether the units take 16×16×16 bf16 × bf16 + f32 products.
    bool bf16_structures = true;
    bool bf16_matrix_shape = false;
    // Whether those shapes are offered only as multiples of a flexible shape: the device then
    // enables VK_NV_cooperative_matrix2's cooperativeMatrixFlexibleDimensions with the units (the
    // shapes list a flexible one only where the device supports it and its structure may be chained).
    bool flexible_matrix_shapes = false;
    // The workgroup sizes at which the device offers flexible f16 workgroup-scope matrices, with
    // their granularities (workgroup_matrix_granularities), and whether their features may be asked
    // for and enabled: VK_NV_cooperative_matrix2's structure known to any layer on, an instance of
    // Vulkan 1.3.
    WorkgroupGranularities workgroup_matrix_granularity{};
    WorkgroupGranularities workgroup_matrix_bf16_granularity{};  // the same for bf16 operands
    bool workgroup_matrices = false;
    // Whether VK_KHR_shader_maximal_reconvergence's feature structure may be chained (a validation
    // layer older than it reports it as an error) and the shaders patched with it where offered
    // ($VKATTN_MAXIMAL_RECONVERGENCE=0 turns it off, to compare).
    bool maximal_reconvergence = true;
    // Whether to enable pipelineExecutableInfo (where offered) and capture each kernel's statistics.
    bool kernel_statistics = false;
};

class Device {
public:
    // Creates a device with one compute queue and every optional feature the physical device offers
    // (VK_KHR_cooperative_matrix only where options allow it and its shape is offered).
    explicit Device(VkPhysicalDevice physical, const DeviceOptions& options = {});
    // Adopts the caller's device and queue; `enabled` is what its creator enabled.
    Device(VkPhysicalDevice physical, VkDevice device, std::uint32_t queue_family, std::uint32_t queue_index,
           const DeviceFeatures& enabled, const DeviceOptions& options = {});
    VkDevice get() const { return device_.get(); }
    VkPhysicalDevice physical() const { return physical_; }
    VkQueue queue() const { return queue_; }
    std::uint32_t queue_family() const { return queue_family_; }
    const DeviceCaps& caps() const { return caps_; }
    const DeviceFeatures& features() const { return features_; }     // enabled
    const DeviceFeatures& available() const { return available_; }   // offered by the physical device
    bool adopted() const { return adopted_; }                         // the caller's (never destroyed)
    // Identifies device + driver build, for the on-disk pipeline cache.
    const std::array<std::uint8_t, VK_UUID_SIZE>& pipeline_cache_uuid() const { return cache_uuid_; }
    std::uint32_t vendor_id() const { return caps_.vendor_id; }
    std::uint32_t device_id() const { return device_id_; }
    std::uint32_t driver_version() const { return driver_version_; }
    // ContextOptions::max_loop_iterations: the tuning then cuts work for at most `iterations` loop
    // trips per invocation (the lower of it and the device's own limit).
    void lower_loop_limit(std::uint32_t iterations) {
        if (iterations != 0 && (caps_.max_loop_iterations == 0 || iterations < caps_.max_loop_iterations))
            caps_.max_loop_iterations = iterations;
    }

    // The first memory type allowed by `type_bits` with all `required` flags, preferring one that
    // also has `preferred`. Throws ResourceLimit when none fits.
    std::uint32_t memory_type(std::uint32_t type_bits, VkMemoryPropertyFlags required,
                              VkMemoryPropertyFlags preferred) const;
    VkMemoryPropertyFlags memory_flags(std::uint32_t type) const;

private:
    // Fills caps_ and the identity from the physical device and features_.
    void describe();

    VkPhysicalDevice physical_ = VK_NULL_HANDLE;
    Handle<VkDevice> device_;
    VkQueue queue_ = VK_NULL_HANDLE;
    std::uint32_t queue_family_ = 0;
    DeviceFeatures features_, available_;
    DeviceOptions options_;
    bool adopted_ = false;
    DeviceCaps caps_;
    VkPhysicalDeviceMemoryProperties memory_{};
    std::array<std::uint8_t, VK_UUID_SIZE> cache_uuid_{};
    std::uint32_t device_id_ = 0;
    std::uint32_t driver_version_ = 0;
};

}  // namespace vkattn::vk

// What the tuning function may know about a device: plain numbers, no Vulkan handles, so tuning is a
// pure function that unit tests can drive with made-up devices.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "vkattn/errors.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::vk {

enum class DeviceKind : std::uint8_t { discrete, integrated, virtual_gpu, cpu, other };

// The matrix units' tile for the cooperative-matrix kernels (common/coopmat.glsl): 16 × 16, their
// own; or, where a device lists no 16 × 16 × 16 shape, the parts each 16 × 16 matrix is made of
// (CM_PARTS): M × N of 8 or 16, 16 deep (Intel's Arc lists 8 × 8 × 16, Xe2 8 × 16 × 16). {0, 0}:
// none.
struct MatrixTile {
    std::uint32_t m = 0, n = 0;
    bool found() const { return m != 0 && n != 0; }
    bool parts() const { return found() && (m != 16 || n != 16); }
    bool operator==(const MatrixTile&) const = default;
};

// A flexible workgroup-scope shape's granularities (VK_NV_cooperative_matrix2's
// VkCooperativeMatrixFlexibleDimensionsPropertiesNV): at its workgroup size, the rows of every A and
// accumulator are a multiple of m, A's columns and B's rows of k, B's and the accumulators'
// columns of n. All 0: none offered. NVIDIA's drivers list 32 x 16 x 16 at 128 invocations and
// 32 x 32 x 16 at 256.
struct MatrixGranularity {
    std::uint32_t m = 0, n = 0, k = 0;
    bool offered() const { return m != 0 && n != 0 && k != 0; }
};
// Per workgroup size 2^i (i < 11: up to 1,024 invocations), the finest f16 x f16 + f32 shape offered.
using WorkgroupGranularities = std::array<MatrixGranularity, 11>;

struct DeviceCaps {
    std::string name;
    DeviceKind kind = DeviceKind::other;
    std::uint32_t vendor_id = 0;
    std::uint32_t subgroup_size = 1;
    // Compute units (SMs, CUs, shader cores) where a vendor extension tells them, else 0
    // (vk/device_facts.hpp): what a grid must fill several times over.
    std::uint32_t compute_units = 0;
    bool subgroup_arithmetic = false;  // subgroupAdd/Max in compute shaders
    bool subgroup_shuffle = false;
    // VK_EXT_subgroup_size_control (core in 1.3): a pipeline may require a subgroup size in
    // [min_subgroup_size, max_subgroup_size] and full subgroups.
    bool subgroup_size_control = false;
    // The matrix units (issue #33): VK_KHR_cooperative_matrix enabled on the device with a 16×16×16
    // f16 × f16 + f32 subgroup shape, and this build has their shaders (VKATTN_COOPMAT_UNITS). The
    // cooperative-matrix kernels run on them then, else their portable implementation.
    bool matrix_units = false;
    MatrixTile matrix_tile{16, 16};  // on the units: the kernels' 16 × 16 matrices, or their parts
    // bf16 operands on the matrix units too (the kernels' bf16 builds): VK_KHR_shader_bfloat16's
    // features enabled, a 16×16×16 bf16 shape offered, and this build has those shaders (a glslang
    // that compiles GL_EXT_bfloat16). Else bf16 storage takes the cooperative-matrix kernels only
    // where they run portably (no matrix units).
    bool bf16_matrix_units = false;
    // The workgroup-matrix kernel (shaders/flash_cm2.comp) runs: matrix_units, VK_NV_cooperative_matrix2's
    // workgroup scope and the rest it uses enabled (DeviceInfo::workgroup_matrices), a flexible f16
    // workgroup shape offered at the workgroup sizes of workgroup_matrix_granularity (index i: 2^i
    // invocations, with its granularities), up to workgroup_matrix_max_invocations invocations and
    // matrices of workgroup_matrix_max_dimension, the driver keeping workgroup_matrix_reserved_shared
    // bytes of shared memory for them.
    bool workgroup_matrices = false;
    WorkgroupGranularities workgroup_matrix_granularity{};
    // bf16 operands on them too (flash_cm2.comp's bf16 builds): workgroup_matrices, bf16_matrix_units
    // (VK_KHR_shader_bfloat16 enabled), a flexible bf16 workgroup shape offered at the sizes of
    // workgroup_matrix_bf16_granularity, and this build has those shaders.
    bool workgroup_bf16_matrices = false;
    WorkgroupGranularities workgroup_matrix_bf16_granularity{};
    std::uint32_t workgroup_matrix_max_invocations = 0;
    std::uint32_t workgroup_matrix_max_dimension = 0;
    std::uint32_t workgroup_matrix_reserved_shared = 0;
    std::uint32_t min_subgroup_size = 1, max_subgroup_size = 1;
    std::uint32_t max_shared_bytes = 16384;
    std::uint32_t max_workgroup_invocations = 128;
    std::uint32_t max_workgroup_count[3] = {65535, 65535, 65535};
    std::uint64_t max_storage_buffer_range = 1u << 27;
    std::uint64_t max_texel_buffer_elements = 65536;
    std::uint64_t max_allocation_bytes = 1u << 30;
    std::uint64_t device_memory_bytes = 1u << 30;  // the largest device-local heap: one request's budget
    std::uint64_t min_storage_offset_alignment = 256;
    std::uint64_t min_texel_offset_alignment = 256;
    std::uint64_t min_uniform_offset_alignment = 256;
    bool texel_rgba32f = false;  // uniform texel buffers of R32G32B32A32_SFLOAT
    bool texel_rgba16f = false;
    bool texel_r32ui = false;    // 32-bit word views (every storage type, decoded in the shader)
    bool fp16_storage = false;    // storageBuffer16BitAccess, enabled on the logical device
    bool fp16_storage_supported = false;  // ... offered by the physical device (the caller may not enable it)
    bool fp16_arithmetic = false;  // shaderFloat16
    bool int8_arithmetic = false;
    bool host_visible_device_memory = false;  // device-local memory that can be mapped
    double timestamp_period_ns = 1.0;
    bool timestamps = true;  // the queue family writes timestamps (timestampValidBits > 0)
    // shaderSignedZeroInfNanPreserveFloat32: shaders may be told to keep IEEE ±∞ and NaN
    // (vk/spirv_float_controls.hpp); without it NaN/∞ inputs have no guaranteed effect.
    bool preserve_inf_nan_f32 = false;
    bool maximal_reconvergence = false;  // every pipeline gets MaximallyReconvergesKHR (vk/spirv_patch.hpp)
    bool kernel_statistics = false;      // every pipeline captures its statistics (vk/pipeline_statistics.hpp)
    bool subgroup_clock = false;         // shaders may read the subgroup's clock (vkattn/testing/clock_probe.hpp)
    // The most loop iterations one invocation may run before the driver ends its loops silently (0:
    // no such limit). Mesa's llvmpipe (lavapipe) stops after 65,535 back-edges, counted across the
    // loops nested in one invocation (docs/LAVAPIPE.md); kernels whose trip
    // counts grow with the sequence are cut into dispatches below it.
    std::uint32_t max_loop_iterations = 0;
};

// Refuses `dtype` (f16 or bf16) data that a kernel writes with 16-bit stores (InvalidArgument naming
// `argument`) on a device that cannot, saying whether the device lacks 16-bit storage or its
// creator did not enable it (the caller's device). Reading 16-bit data needs nothing: the kernels
// read words or texels.
inline void require_fp16_storage(const DeviceCaps& caps, const char* argument, DType dtype = DType::f16) {
    if (caps.fp16_storage) return;
    const std::string what = to_string(dtype);
    if (caps.fp16_storage_supported)
        throw InvalidArgument(argument, what + " is written with 16-bit stores, which need storageBuffer16BitAccess: the device " +
                                            caps.name + " offers it but was created without it (enable it in "
                                            "VkPhysicalDeviceVulkan11Features); use f32.");
    throw InvalidArgument(argument, what + " is written with 16-bit stores, and the device " + caps.name +
                                        " does not support 16-bit storage buffers; use f32.");
}

// The granularities of the workgroup matrices `granularity` offers at `invocations`, or nullptr
// where it offers none there (or `invocations` is no power of two up to 1,024).
inline const MatrixGranularity* granularity_at(const WorkgroupGranularities& granularity, std::uint32_t invocations) {
    for (std::size_t i = 0; i < granularity.size(); ++i)
        if (invocations == (1u << i)) return granularity[i].offered() ? &granularity[i] : nullptr;
    return nullptr;
}
// Whether it offers them at any size.
inline bool offers_workgroup_matrices(const WorkgroupGranularities& granularity) {
    for (const MatrixGranularity& g : granularity)
        if (g.offered()) return true;
    return false;
}

}  // namespace vkattn::vk

// Execution modes added to a compute shader's SPIR-V at load time, where the device supports them.
// GLSL can only declare a mode unconditionally (and Debian's glslang cannot spell the newer ones),
// while a device that does not report the feature must not be given it: so one SPIR-V per shader,
// patched as its pipeline is built.
//
// - SignedZeroInfNanPreserve 32: without it a Vulkan implementation may assume that no float is ±∞
//   or NaN and fold comparisons with them away; with it, NaN and ±∞ in the inputs propagate as IEEE
//   754 says. The shaders never rely on infinities for their own logic (finite sentinels, bit
//   tests), so the mode only decides whether NaN/∞ inputs keep their documented meaning
//   (docs/SEMANTICS.md).
// - MaximallyReconvergesKHR (VK_KHR_shader_maximal_reconvergence): invocations that diverge at a
//   branch meet again where the branch's construct ends. The core rules promise that only in
//   uniform control flow, and the kernels' subgroup shuffles, reductions and cooperative-matrix
//   operations follow per-lane branches (a row's mask, a key past the end): without the mode a
//   driver may run them on part of a subgroup (docs/design/GPU_KERNELS.md, "Reconvergence").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace vkattn::vk {

struct SpirvPatch {
    bool preserve_inf_nan_f32 = false;   // needs SPIR-V 1.4+, where float controls are core
    bool maximal_reconvergence = false;  // OpExtension SPV_KHR_maximal_reconvergence
    bool any() const { return preserve_inf_nan_f32 || maximal_reconvergence; }
};

// The module with the patch's capabilities and extensions after its own and its execution modes on
// every entry point. Throws on malformed SPIR-V, or SPIR-V too old for a mode.
std::vector<std::uint32_t> patch_spirv(std::span<const std::uint32_t> spirv, const SpirvPatch& patch);

}  // namespace vkattn::vk

// SignedZeroInfNanPreserve for a compute shader, added to its SPIR-V when the device supports it.
// Without the execution mode a Vulkan implementation may assume that no float is ±∞ or NaN and fold
// comparisons with them away; with it, NaN and ±∞ in the inputs propagate as IEEE 754 says. The
// shaders never rely on infinities for their own logic (finite sentinels, bit tests), so the mode
// only decides whether NaN/∞ inputs keep their documented meaning (docs/SEMANTICS.md).
// GLSL can only declare the mode unconditionally (GL_EXT_spirv_intrinsics), and a device that does
// not report shaderSignedZeroInfNanPreserveFloat32 must not be given it: so one SPIR-V per shader,
// patched at load time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace vkattn::vk {

// The module with OpCapability SignedZeroInfNanPreserve and OpExecutionMode SignedZeroInfNanPreserve
// 32 on every entry point (SPIR-V 1.4+, where float controls are core). Throws on malformed SPIR-V.
std::vector<std::uint32_t> preserve_inf_nan_f32(std::span<const std::uint32_t> spirv);

}  // namespace vkattn::vk

// The clock a device's shaders run at, read the moment it is asked: so that a benchmark can say at
// what clock its timed runs ran (vk-attn bench's sm_mhz). A GPU's clock follows its load: an H200
// idles at 345 MHz and boosts to ~1,980, and a run timed before the boost reads up to 5x slow with
// nothing wrong in the kernel (sessions 21-26's "slow episodes", docs/PERFORMANCE.md).
#pragma once

#include <optional>

namespace vkattn {
class Context;
}

namespace vkattn::testing {

// MHz: two dispatches of one invocation spinning a chain of dependent FMAs (shaders/clock_probe.comp),
// 32,768 and 131,072 of them, each timed by the batch's timestamps and counted in the subgroup's
// clock (VK_KHR_shader_clock's shaderSubgroupClock: the SM's cycles on NVIDIA, the CPU's cycle
// counter on lavapipe); the cycles' difference over the times' difference, so that what a dispatch
// costs to start cancels; the median of three such pairs. nullopt where the device cannot read the
// clock in a shader (DeviceCaps::subgroup_clock: not offered, or a caller's device that did not
// enable it) or writes no timestamps.
std::optional<double> shader_clock_mhz(Context& context);

}  // namespace vkattn::testing

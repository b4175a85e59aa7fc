#version 450
// The clock probe (vkattn/testing/clock_probe.hpp): one subgroup spins a chain of dependent FMAs and
// reads its clock (GL_ARB_shader_clock; VK_KHR_shader_clock's shaderSubgroupClock: the SM's cycles
// on NVIDIA) before and after. The host times two such dispatches of different lengths with
// timestamps; the difference of their cycles over the difference of their times is the clock the
// GPU ran at, whatever a dispatch costs to start. A chain, so that its length in cycles does not
// depend on how many lanes run or how wide the device issues.
#extension GL_ARB_shader_clock : require
#extension GL_EXT_control_flow_attributes : enable

#include "common/clock_probe_params.glsl"

layout(local_size_x = 1) in;
layout(std430, set = 0, binding = 1) writeonly buffer Cycles { uint cycles[]; };  // [2]: low, high word

void main() {
    const uvec2 start = clock2x32ARB();
    float x = 1.0 + float(gl_LocalInvocationIndex) * 1e-7;
    // 16 FMAs a trip, so that the trips stay far below lavapipe's 65,535 back-edges.
    for (uint trip = 0u; trip < P.trips; ++trip)
        [[unroll]] for (uint f = 0u; f < 16u; ++f) x = fma(x, 0.99999994, 1e-7);
    const uvec2 end = clock2x32ARB();
    uint borrow;
    const uint low = usubBorrow(end.x, start.x, borrow);
    cycles[0] = low;
    cycles[1] = end.y - start.y - borrow;
    // The chain's result, so that no compiler drops it: never 0 (x stays near 1).
    cycles[2] = x == 0.0 ? 1u : 0u;
}

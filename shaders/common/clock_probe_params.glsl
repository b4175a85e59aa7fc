// clock_probe.comp's parameter block. Mirrored by ClockProbeParams in engine/attention/params.hpp.
#ifndef VKATTN_CLOCK_PROBE_PARAMS_GLSL
#define VKATTN_CLOCK_PROBE_PARAMS_GLSL

layout(std140, set = 0, binding = 0) uniform ClockProbeParams {
    uint trips;  // trips of 16 dependent FMAs
} P;

#endif

#version 450
// The bandwidth ceiling's kernel (vkattn::testing::benchmark_copy): src to dst in 16-byte words, as
// a GPU's memory is best read: each load a uvec4 (16 bytes per lane), consecutive invocations on
// consecutive words (a 32-lane subgroup reads 512 contiguous bytes per load), UNROLL loads issued
// before the first store so that several are in flight per invocation, and a grid that strides
// over the words when it is smaller than they are. A DMA copy (vkCmdCopyBuffer) reaches a copy
// engine's rate, not the memory's (851 GB/s against 4.2 TB/s on an H200), so decode's K/V rate
// is quoted against this instead.
#extension GL_EXT_control_flow_attributes : enable

#include "common/copy_params.glsl"

#define WORKGROUP 256u
#define UNROLL 4u
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 1) readonly buffer Source { uvec4 src[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Destination { uvec4 dst[]; };

void main() {
    // A workgroup's step covers WORKGROUP·UNROLL consecutive words; the grid's steps follow each other.
    const uint step = gl_NumWorkGroups.x * WORKGROUP * UNROLL;
    for (uint base = gl_WorkGroupID.x * WORKGROUP * UNROLL + gl_LocalInvocationID.x; base < P.count; base += step) {
        uvec4 words[UNROLL];
        [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
            const uint i = base + u * WORKGROUP;
            if (i < P.count) words[u] = src[i];
        }
        [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
            const uint i = base + u * WORKGROUP;
            if (i < P.count) dst[i] = words[u];
        }
    }
}

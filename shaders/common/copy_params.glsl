// copy.comp's parameter block. Mirrored by CopyParams in engine/attention/params.hpp.
#ifndef VKATTN_COPY_PARAMS_GLSL
#define VKATTN_COPY_PARAMS_GLSL

layout(std140, set = 0, binding = 0) uniform CopyParams {
    uint count;  // 16-byte words in this dispatch's bindings (each binding holds exactly these)
} P;

#endif

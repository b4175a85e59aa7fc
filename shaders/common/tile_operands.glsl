// The fused kernels' operands (flash.comp, flash_tile.comp, flash_coopmat.comp): flash.comp's
// bindings read through the typed loaders (every storage type dequantizes as it loads; paged K/V
// through up to four pools), the masks, varlen and paged rows. Requires of the includer: the
// specialization constants Q_TYPE, K_TYPE, V_TYPE (and POOLS where PAGED), and
// common/flash_params.glsl included.
// load_k4 / load_v4 take a (pool, index) pair, as K_ROW and V_ROW (common/paged_rows.glsl) give;
// so do load_k_block / load_v_half_block (ggml's blocks a block at a time; not with TEXEL).
#ifndef VKATTN_TILE_OPERANDS_GLSL
#define VKATTN_TILE_OPERANDS_GLSL

float k_scale = 1.0, v_scale = 1.0;
#define OL_NAME load_q4
#define OL_SLOT 1
#define OL_TYPE Q_TYPE
#include "common/operand_loader.glsl"
#define OL_NAME load_k4_0
#define OL_SLOT 2
#define OL_TYPE K_TYPE
#define OL_SCALE k_scale
#include "common/operand_loader.glsl"
#define OL_NAME load_v4_0
#define OL_SLOT 3
#define OL_TYPE V_TYPE
#define OL_SCALE v_scale
#include "common/operand_loader.glsl"
#ifdef PAGED
#define OL_NAME load_k4_1
#define OL_SLOT 10
#define OL_TYPE K_TYPE
#define OL_SCALE k_scale
#include "common/operand_loader.glsl"
#define OL_NAME load_k4_2
#define OL_SLOT 11
#define OL_TYPE K_TYPE
#define OL_SCALE k_scale
#include "common/operand_loader.glsl"
#define OL_NAME load_k4_3
#define OL_SLOT 12
#define OL_TYPE K_TYPE
#define OL_SCALE k_scale
#include "common/operand_loader.glsl"
#define OL_NAME load_v4_1
#define OL_SLOT 13
#define OL_TYPE V_TYPE
#define OL_SCALE v_scale
#include "common/operand_loader.glsl"
#define OL_NAME load_v4_2
#define OL_SLOT 14
#define OL_TYPE V_TYPE
#define OL_SCALE v_scale
#include "common/operand_loader.glsl"
#define OL_NAME load_v4_3
#define OL_SLOT 15
#define OL_TYPE V_TYPE
#define OL_SCALE v_scale
#include "common/operand_loader.glsl"
vec4 load_k4(uint pool, uint index, uint valid) {
    if (POOLS == 1u || pool == 0u) return load_k4_0(index, valid);
    if (pool == 1u) return load_k4_1(index, valid);
    if (pool == 2u) return load_k4_2(index, valid);
    return load_k4_3(index, valid);
}
vec4 load_v4(uint pool, uint index, uint valid) {
    if (POOLS == 1u || pool == 0u) return load_v4_0(index, valid);
    if (pool == 1u) return load_v4_1(index, valid);
    if (pool == 2u) return load_v4_2(index, valid);
    return load_v4_3(index, valid);
}
#ifndef TEXEL
TlBlock load_k_block(uint pool, uint index) {
    if (POOLS == 1u || pool == 0u) return load_k4_0_block(index);
    if (pool == 1u) return load_k4_1_block(index);
    if (pool == 2u) return load_k4_2_block(index);
    return load_k4_3_block(index);
}
TlBlock load_v_half_block(uint pool, uint index) {
    if (POOLS == 1u || pool == 0u) return load_v4_0_half_block(index);
    if (pool == 1u) return load_v4_1_half_block(index);
    if (pool == 2u) return load_v4_2_half_block(index);
    return load_v4_3_half_block(index);
}
#endif
#else
vec4 load_k4(uint pool, uint index, uint valid) { return load_k4_0(index, valid); }
vec4 load_v4(uint pool, uint index, uint valid) { return load_v4_0(index, valid); }
#ifndef TEXEL
TlBlock load_k_block(uint pool, uint index) { return load_k4_0_block(index); }
TlBlock load_v_half_block(uint pool, uint index) { return load_v4_0_half_block(index); }
#endif
#endif

#define OUT_SLOT 4
#include "common/typed_store.glsl"
layout(std430, set = 0, binding = 5) writeonly buffer Lse { float lse[]; };
layout(std430, set = 0, binding = 6) readonly buffer KvLengths { int kv_lengths[]; };
layout(std430, set = 0, binding = 7) readonly buffer BoolMask { uint bool_words[]; };
layout(std430, set = 0, binding = 8) readonly buffer FloatMask { float float_mask[]; };
layout(std430, set = 0, binding = 9) readonly buffer HeadTerms { float head_terms[]; };
layout(std430, set = 0, binding = 17) readonly buffer CuSeqlensQ { int cu_q[]; };
layout(std430, set = 0, binding = 18) readonly buffer CuSeqlensK { int cu_k[]; };

#define VARLEN
#include "common/mask.glsl"
#include "common/philox.glsl"
#include "common/paged_rows.glsl"

#endif  // VKATTN_TILE_OPERANDS_GLSL

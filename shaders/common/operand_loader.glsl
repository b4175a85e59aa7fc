// One operand's loader for the flash kernels (flash.comp and the backward's), by the variant's
// defines: included once per operand with
//   OL_NAME  the function to define: vec4 OL_NAME(uint index, uint valid)
//   OL_SLOT  its binding
//   OL_TYPE  its storage type (a specialization constant; common/storage_types.glsl)
//   OL_SCALE (optional) an fp8 operand's scale, as typed_load.glsl's TL_SCALE (word variants)
// TEXEL variants read f32/f16 through float texel views (RGBA32F/RGBA16F: the view converts);
// WORD_TEXELS variants read 32-bit words through R32_UINT views; the others read words from a
// storage buffer. Both texel kinds need every row to start on 4 elements (the tuning's rule), which
// the word loader then relies on (TL_ALIGNED). flash.comp and the backward kernels load through it.
#ifndef OL_CAT
#define OL_CAT2(a, b) a##b
#define OL_CAT(a, b) OL_CAT2(a, b)
#endif
#ifdef TEXEL
layout(set = 0, binding = OL_SLOT) uniform samplerBuffer OL_CAT(OL_NAME, _texels);
vec4 OL_NAME(uint index, uint valid) { return texelFetch(OL_CAT(OL_NAME, _texels), int(index >> 2)); }
#else
#define TL_NAME OL_NAME
#define TL_SLOT OL_SLOT
#define TL_TYPE OL_TYPE
#ifdef OL_SCALE
#define TL_SCALE OL_SCALE
#endif
#ifdef WORD_TEXELS
#define TL_ALIGNED true
#endif
#include "common/typed_load.glsl"
#endif
#undef OL_NAME
#undef OL_SLOT
#undef OL_TYPE
#undef OL_SCALE

// An output's storage: bfloat16 bits (rounded to nearest even), fp16 or fp32. Included once per
// output, with
//   TS_NAME  the function to define: void TS_NAME(uint index, float value) (default store_out)
//   TS_SLOT  its binding (default OUT_SLOT)
//   TS_BF16 or TS_F16 the storage (default fp32; without TS_NAME, OUT_BF16 / OUT_F16 say it)
// 16-bit outputs need the device's storageBuffer16BitAccess (inputs never do: common/typed_load.glsl
// reads words).
#extension GL_EXT_shader_16bit_storage : require
#include "common/float_bits.glsl"

#ifndef TS_NAME
#define TS_NAME store_out
#define TS_SLOT OUT_SLOT
#if defined(OUT_BF16)
#define TS_BF16
#elif defined(OUT_F16)
#define TS_F16
#endif
#endif
#define TS_CAT2(a, b) a##b
#define TS_CAT(a, b) TS_CAT2(a, b)

#if defined(TS_BF16)
layout(std430, set = 0, binding = TS_SLOT) writeonly buffer TS_CAT(TS_NAME, _buffer) { uint16_t TS_CAT(TS_NAME, _data)[]; };
void TS_NAME(uint index, float value) { TS_CAT(TS_NAME, _data)[index] = uint16_t(bf16_bits(value)); }
#elif defined(TS_F16)
layout(std430, set = 0, binding = TS_SLOT) writeonly buffer TS_CAT(TS_NAME, _buffer) { float16_t TS_CAT(TS_NAME, _data)[]; };
void TS_NAME(uint index, float value) { TS_CAT(TS_NAME, _data)[index] = float16_t(value); }
#else
layout(std430, set = 0, binding = TS_SLOT) writeonly buffer TS_CAT(TS_NAME, _buffer) { float TS_CAT(TS_NAME, _data)[]; };
void TS_NAME(uint index, float value) { TS_CAT(TS_NAME, _data)[index] = value; }
#endif

#undef TS_NAME
#undef TS_SLOT
#undef TS_BF16
#undef TS_F16

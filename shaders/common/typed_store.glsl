// An output's storage, by define: OUT_BF16 (bfloat16 bits, rounded to nearest even), OUT_F16, or
// fp32. Declares the buffer at binding OUT_SLOT and store_out(index, value). 16-bit outputs need
// the device's storageBuffer16BitAccess (inputs never do: common/typed_load.glsl reads words).
#extension GL_EXT_shader_16bit_storage : require
#include "common/float_bits.glsl"

#if defined(OUT_BF16)
layout(std430, set = 0, binding = OUT_SLOT) writeonly buffer OutBuffer { uint16_t out_data[]; };
void store_out(uint index, float value) { out_data[index] = uint16_t(bf16_bits(value)); }
#elif defined(OUT_F16)
layout(std430, set = 0, binding = OUT_SLOT) writeonly buffer OutBuffer { float16_t out_data[]; };
void store_out(uint index, float value) { out_data[index] = float16_t(value); }
#else
layout(std430, set = 0, binding = OUT_SLOT) writeonly buffer OutBuffer { float out_data[]; };
void store_out(uint index, float value) { out_data[index] = value; }
#endif

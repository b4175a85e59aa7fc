// Cooperative 16 × 16 × 16 matrix products behind one small interface (issue #33), so that a kernel
// is written once and runs on a GPU's matrix units or, portably, on any device (lavapipe included):
//   CM_KHR defined: GL_KHR_cooperative_matrix, subgroup scope, f16 operands, fp32 accumulators;
//   otherwise:      the portable implementation, from the subgroup's invocations and shared memory.
// CM_BF16 defined, the operands are bf16 instead of f16 (fp32's range, 8 bits of mantissa): on the
// units GL_EXT_bfloat16's matrices (VK_KHR_shader_bfloat16), portably fp32 values rounded to bf16.
// Everything below that says f16 of the operands means the operand type.
// A subgroup owns each matrix. Operands come from tiles in shared memory; accumulators live in
// registers, and their elements reach the kernel only through a store into an fp32 tile (the
// matrix units spread them over the lanes in an order Vulkan does not define), and come back from
// one with CM_LOAD_ACC.
//
// The tiles (declared with these macros at global scope; every offset and stride below counts
// elements, f16 operands or fp32 values, whatever the tile's declared type):
//   CM_OPERAND_TILE(name, n)    n f16 operands (n a multiple of 8) as 16-byte words on the units
//                               (uvec4), so that every matrix load is 16-byte aligned by its type,
//                               as NVIDIA's own sample declares its tiles; written 8 (CM_PUT8) or 2
//                               (CM_PUT2) elements at a time. flash_coopmat.comp ran 15-25% faster
//                               so on an H100 (session 23), bmm_coopmat.comp 10% slower (fp32
//                               storage, whose loads were its wall); it uses them again since
//                               session 28, with 16-byte loads and two buffers.
//   CM_OPERAND_TILE_SCALAR(name, n)  n f16 operands as f16 scalars, written one at a time with
//                               name[i] = CM_TO_ELEM(x) (the backward's transposed W and dS)
//   CM_ACC_TILE(name, n)        n fp32 values as vec4 (n a multiple of 4) on the units; elements
//                               read and written with CM_AT(name, i)
//   CM_ACC_TILE_SCALAR(name, n) n fp32 values as floats, indexed directly
// In the portable implementation every tile is an fp32 array (operands hold f16- or bf16-rounded
// values, so that both implementations round operands alike) and the macros index it directly.
//
// The operations (macros: GLSL cannot pass a shared array to a function):
//   CmA a; CmB b; CmAcc c;              the types: A 16×16 (rows × k), B 16×16 (k × columns), C
//   CM_FILL(c, value)                   every element of c = value
//   CM_LOAD_A(a, tile, offset, stride)  A's element (i, k) = tile[offset + i·stride + k] (row-major)
//   CM_LOAD_B(b, tile, offset, stride)  B's element (k, j) = tile[offset + k·stride + j] (row-major)
//   CM_LOAD_BT(b, tile, offset, stride) B's element (k, j) = tile[offset + j·stride + k] (B stored
//                                       transposed, as K's rows are for S = Q·Kᵀ)
//   CM_LOAD_AT(a, tile, offset, stride) A's element (i, k) = tile[offset + k·stride + i] (A stored
//                                       transposed, as the GEMM's Aᵀ·B reads it)
//   CM_LOAD_ACC(c, tile, offset, stride) c's element (i, j) = tile[offset + i·stride + j], fp32
//   CM_COPY_A(a, a2)                    a = a2 (the portable A's array is sized by CM_SG, which GLSL
//                                       cannot assign whole)
//   CM_MUL_ADD(c, a, b, tile_b)         c += a·b (tile_b: the array b was loaded from)
//   CM_SCALE(c, s)                      c *= s (a uniform scalar)
//   CM_MUL_ELEMENTS(c, d)               c's element (i, j) *= d's (i, j), both accumulators: a
//                                       per-row rescale is c times a CM_LOAD_ACC of the row factors
//   CM_ADD(c, d)                        c += d, both accumulators
//   CM_STORE(c, tile, offset, stride)   tile[offset + i·stride + j] = c's element (i, j), fp32
//   CM_PUT8(tile, i, lo, hi)            an operand tile's elements i..i+7 (i a multiple of 8) = lo
//                                       and hi, two CM_ELEM4 (already rounded by CM_TO_ELEM4)
//   CM_PUT2(tile, i, x, y)              an operand tile's elements i, i+1 (i even) = x, y, rounded
//   CM_AT(tile, i)                      an fp32 tile's element i (an lvalue)
//   CM_STORE_F32(c, tile, offset, stride), CM_F32_AT(tile, i): c stored into an operand tile as fp32
//                                       values, offset and stride counting fp32 values, and value i
//                                       read back; each takes CM_F32_SLOTS of the tile's n elements
//                                       (a kernel's slices reused for its output)
//   CM_ELEM4, CM_TO_ELEM4(v)            4 operand values in registers (f16 on the units; bf16 there as
//                                       two words of pairs), as a
//                                       kernel holds a tile's loads in flight before it stores them
//   CM_UNPACK8(word, lo, hi)            lo, hi (CM_ELEM4) = the 8 f16 (bf16) values of a 16-byte word
//   CM_FETCH8(load4, at, d, D, lo, hi)  lo, hi (CM_ELEM4) = a row's elements d..d+7 through a
//                                       4-element loader load4(index, valid), `at` the index of
//                                       element d; zeros from element D on (nothing loaded there)
// Rules for the kernels: a subgroup's lanes all take part in every operation (uniform control
// flow); B's tile stays unchanged from its CM_LOAD_B to its last CM_MUL_ADD (the portable B refers
// to its tile; A operands and accumulators are copies in registers on both); a CM_STORE's values
// are visible to the other lanes after CM_SUBGROUP_SYNC() (or a workgroup barrier). Offsets and
// strides are multiples of 16 bytes, as the units' loads require (8 operands, 4 fp32 values).
// One matrix per declaration: glslang 13 drops the use of a second declarator (`CmAcc a[2], b[2];`
// makes b a matrix of no use, which no assignment converts to).
// Requires of the includer: CM_SG, the subgroup size the kernel's layout assumes (a constant or a
// specialization constant; the kernel checks gl_SubgroupSize against it).
// CM_LOOP marks the loops over a kernel's operands and accumulators: unrolled for the units (each
// matrix a register), a loop in the portable implementation (lavapipe compiles unrolled products
// for minutes).
#ifndef VKATTN_COOPMAT_GLSL
#define VKATTN_COOPMAT_GLSL

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : enable

const uint CM_DIM = 16u;  // M = N = K

// A subgroup's lanes meet, and each lane's shared-memory accesses before it happen before every
// lane's after (a subgroup's tiles: its stores then its lanes' reads, or its reads then the next
// stores). Shared memory only: subgroupMemoryBarrierShared() with subgroupBarrier() also orders
// buffer and image memory (subgroupBarrier's semantics are 0xD48), which a driver may honour by a
// memory fence that waits for every load in flight, the K/V tile held ahead in registers
// (common/coopmat_kv_staging.glsl) included, so that its loads would land at the first subgroup
// barrier after they are issued rather than at the store that needs them.
#define CM_SUBGROUP_SYNC() \
    controlBarrier(gl_ScopeSubgroup, gl_ScopeSubgroup, gl_StorageSemanticsShared, gl_SemanticsAcquireRelease)

// bf16's rounding of an fp32 value, as its 16 bits (nearest even, past bf16's range ±inf, NaN kept
// and quiet): the host's float_to_bf16, in integers, so that every compiler rounds alike.
uint cm_bf16_bits(float x) {
    const uint bits = floatBitsToUint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
    return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}
uint cm_bf16_pair(vec2 v) { return cm_bf16_bits(v.x) | (cm_bf16_bits(v.y) << 16u); }
uvec2 cm_bf16_four(vec4 v) { return uvec2(cm_bf16_pair(v.xy), cm_bf16_pair(v.zw)); }

#ifdef CM_KHR
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#define CM_LOOP [[unroll]]
#ifdef CM_BF16
#extension GL_EXT_bfloat16 : require
#define CM_ELEM bfloat16_t
// Rounded in integers, then converted exactly (a bf16 value converts to itself whatever the
// driver's rounding).
#define CM_TO_ELEM(value_) bfloat16_t(uintBitsToFloat(cm_bf16_bits(float(value_)) << 16u))
// 4 operands in registers as two words of bf16 pairs, rounded in integers (cm_bf16_pair above):
// packing bf16vec2 into a word takes 16-bit integer types, another device feature (shaderInt16).
#define CM_ELEM4 uvec2
#define CM_TO_ELEM4(value_) cm_bf16_four(value_)
#define CM_PUT8(tile, i, lo, hi) tile[(i) / 8u] = uvec4(lo, hi)
#define CM_PUT2(tile, i, x, y) tile[(i) / 8u][((i) / 2u) % 4u] = cm_bf16_pair(vec2(x, y))
#define CM_UNPACK8(word, lo, hi)    \
    {                               \
        const uvec4 cm_w = (word);  \
        lo = cm_w.xy;               \
        hi = cm_w.zw;               \
    }
#else
#define CM_ELEM float16_t
#define CM_TO_ELEM(value_) float16_t(value_)
#define CM_ELEM4 f16vec4
#define CM_TO_ELEM4(value_) f16vec4(value_)
#define CM_PUT8(tile, i, lo, hi) \
    tile[(i) / 8u] = uvec4(packFloat2x16((lo).xy), packFloat2x16((lo).zw), packFloat2x16((hi).xy), packFloat2x16((hi).zw))
#define CM_PUT2(tile, i, x, y) tile[(i) / 8u][((i) / 2u) % 4u] = packFloat2x16(f16vec2(CM_TO_ELEM(x), CM_TO_ELEM(y)))
#define CM_UNPACK8(word, lo, hi)                                        \
    {                                                                   \
        const uvec4 cm_w = (word);                                      \
        lo = f16vec4(unpackFloat2x16(cm_w.x), unpackFloat2x16(cm_w.y)); \
        hi = f16vec4(unpackFloat2x16(cm_w.z), unpackFloat2x16(cm_w.w)); \
    }
#endif
#ifdef CM_PARTS
// CM_PARTS: the units' tiles of CM_M × CM_N accumulators (specialization constants, 8 or 16 each;
// K 16), for devices that list no 16 × 16 × 16 shape: Intel's Arc lists 8 × 8 × 16 (Xe2 8 × 16 ×
// 16). Each 16 × 16 matrix of the interface is then its parts: A 16/CM_M of CM_M × 16, B 16/CM_N
// of 16 × CM_N, an accumulator (16/CM_M)·(16/CM_N) of CM_M × CM_N, row-major; every operation
// runs on each part, its offsets moved by the part's first row and column (multiples of 8
// elements, so the units' 16-byte alignment holds). The arrays hold the most parts (8 × 8), and
// the loops run over the specialized count.
layout(constant_id = 40) const uint CM_M = 16;
layout(constant_id = 41) const uint CM_N = 16;
const uint CM_MI = 16u / CM_M, CM_NJ = 16u / CM_N;
#define CmAPart coopmat<CM_ELEM, gl_ScopeSubgroup, CM_M, 16, gl_MatrixUseA>
#define CmBPart coopmat<CM_ELEM, gl_ScopeSubgroup, 16, CM_N, gl_MatrixUseB>
#define CmAccPart coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
// Array types (GLSL's `T[n] name`), so that a kernel's `CmAcc acc[TM * TN]` is an array of arrays:
// Mesa 26.1's lavapipe crashed compiling coopmat members of a struct.
#define CmA CmAPart[2]
#define CmB CmBPart[2]
#define CmAcc CmAccPart[4]
// Loops over the parts, written before a statement (not macros of it: a coopmat type's commas,
// inside its angle brackets, would split a macro's argument).
#define CM_FOR_I [[unroll]] for (uint cm_i = 0u; cm_i < CM_MI; ++cm_i)
#define CM_FOR_J [[unroll]] for (uint cm_j = 0u; cm_j < CM_NJ; ++cm_j)
#define CM_FOR_IJ CM_FOR_I CM_FOR_J
#define CM_P (cm_i * CM_NJ + cm_j)
#else
#define CmA coopmat<CM_ELEM, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define CmB coopmat<CM_ELEM, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define CmAcc coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#endif
// A tile of n elements declared as `type`, `unit` elements each: the loads' offsets and strides
// count declared elements, name##_unit converts.
#define CM_TILE_(type, name, n, unit) \
    shared type name[(n) / (unit)];   \
    const uint name##_unit = unit
#define CM_OPERAND_TILE(name, n) CM_TILE_(uvec4, name, n, 8u)
#define CM_OPERAND_TILE_SCALAR(name, n) CM_TILE_(CM_ELEM, name, n, 1u)
#define CM_ACC_TILE(name, n) CM_TILE_(vec4, name, n, 4u)
#define CM_ACC_TILE_SCALAR(name, n) CM_TILE_(float, name, n, 1u)
#define CM_LOAD_(m, tile, offset, stride, layout) coopMatLoad(m, tile, (offset) / tile##_unit, (stride) / tile##_unit, layout)
#define CM_COPY_A(a, a2) a = (a2)
#ifdef CM_PARTS
#define CM_FILL(c, value) CM_FOR_IJ (c)[CM_P] = CmAccPart(value)
// Part i of A holds rows CM_M·i on; part j of B columns CM_N·j on; the accumulator's part (i, j) both.
#define CM_LOAD_A(a, tile, offset, stride) \
    CM_FOR_I CM_LOAD_((a)[cm_i], tile, (offset) + cm_i * CM_M * (stride), stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_AT(a, tile, offset, stride) \
    CM_FOR_I CM_LOAD_((a)[cm_i], tile, (offset) + cm_i * CM_M, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define CM_LOAD_B(b, tile, offset, stride) \
    CM_FOR_J CM_LOAD_((b)[cm_j], tile, (offset) + cm_j * CM_N, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_BT(b, tile, offset, stride) \
    CM_FOR_J CM_LOAD_((b)[cm_j], tile, (offset) + cm_j * CM_N * (stride), stride, gl_CooperativeMatrixLayoutColumnMajor)
#define CM_PART_AT(offset, stride) ((offset) + cm_i * CM_M * (stride) + cm_j * CM_N)
#define CM_LOAD_ACC(c, tile, offset, stride) \
    CM_FOR_IJ CM_LOAD_((c)[CM_P], tile, CM_PART_AT(offset, stride), stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_MUL_ADD(c, a, b, tile_b) CM_FOR_IJ (c)[CM_P] = coopMatMulAdd((a)[cm_i], (b)[cm_j], (c)[CM_P])
#define CM_SCALE(c, s) CM_FOR_IJ (c)[CM_P] = (c)[CM_P] * float(s)
#define CM_MUL_ELEMENTS(c, d) CM_FOR_IJ (c)[CM_P] = (c)[CM_P] * (d)[CM_P]
#define CM_ADD(c, d) CM_FOR_IJ (c)[CM_P] = (c)[CM_P] + (d)[CM_P]
#define CM_STORE(c, tile, offset, stride)                                                                       \
    CM_FOR_IJ coopMatStore((c)[CM_P], tile, CM_PART_AT(offset, stride) / tile##_unit, (stride) / tile##_unit, \
                           gl_CooperativeMatrixLayoutRowMajor)
#define CM_STORE_F32(c, tile, offset, stride) \
    CM_FOR_IJ coopMatStore((c)[CM_P], tile, CM_PART_AT(offset, stride) / 4u, (stride) / 4u, gl_CooperativeMatrixLayoutRowMajor)
#else
#define CM_FILL(c, value) c = CmAcc(value)
#define CM_LOAD_A(a, tile, offset, stride) CM_LOAD_(a, tile, offset, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_B(b, tile, offset, stride) CM_LOAD_(b, tile, offset, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_BT(b, tile, offset, stride) CM_LOAD_(b, tile, offset, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define CM_LOAD_AT(a, tile, offset, stride) CM_LOAD_(a, tile, offset, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define CM_LOAD_ACC(c, tile, offset, stride) CM_LOAD_(c, tile, offset, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_MUL_ADD(c, a, b, tile_b) c = coopMatMulAdd(a, b, c)
#define CM_SCALE(c, s) c = c * float(s)
#define CM_MUL_ELEMENTS(c, d) c = c * (d)
#define CM_ADD(c, d) c = c + (d)
#define CM_STORE(c, tile, offset, stride) \
    coopMatStore(c, tile, (offset) / tile##_unit, (stride) / tile##_unit, gl_CooperativeMatrixLayoutRowMajor)
#define CM_STORE_F32(c, tile, offset, stride) \
    coopMatStore(c, tile, (offset) / 4u, (stride) / 4u, gl_CooperativeMatrixLayoutRowMajor)
#endif
#define CM_AT(tile, i) tile[(i) / 4u][(i) % 4u]
// An fp32 value takes two f16 slots of an operand tile (uvec4: 4 values per word).
const uint CM_F32_SLOTS = 2u;
#define CM_F32_AT(tile, i) uintBitsToFloat(tile[(i) / 4u][(i) % 4u])

#else  // the portable implementation

// Lanes own rows: CM_LPR lanes share a row (a subgroup of 32: 2, each 8 of its columns), or a lane
// holds CM_RPL rows (a subgroup of 8: rows l and l + 8, all 16 columns). Lane l's rows are
// l / CM_LPR + t·(CM_SG / CM_LPR) for t < CM_RPL, its columns (l % CM_LPR)·CM_CPL + c for c < CM_CPL;
// an accumulator holds those elements, an A operand those rows whole (the products need them), a
// B operand where its tile holds it.
const uint CM_LPR = CM_SG >= CM_DIM ? CM_SG / CM_DIM : 1u;
const uint CM_RPL = CM_SG >= CM_DIM ? 1u : CM_DIM / CM_SG;
const uint CM_CPL = CM_DIM / CM_LPR;
const uint CM_SLOTS = CM_RPL * CM_CPL;
struct CmA {
    float v[CM_RPL * CM_DIM];
};
struct CmB {
    uint offset, k_stride, j_stride;
};
struct CmAcc {
    float v[CM_SLOTS];
};
#define CM_LOOP [[dont_unroll]]
#define CM_ELEM float
// f16's rounding of an fp32 value (nearest even; past f16's range, ±inf), as the units' operands,
// done on the bits: NVIDIA's compiler folds unpackHalf2x16(packHalf2x16(x)) to x, which left the
// portable operands unrounded on a GPU (session 21). Normal f16 values keep 10 of fp32's 23
// mantissa bits; below f16's smallest normal (2⁻¹⁴) the step is 2⁻²⁴, and scaling by 2²⁴ is exact.
float cm_round_f16(float x) {
    const uint bits = floatBitsToUint(x), magnitude = bits & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) return x;                                     // inf, NaN
    if (magnitude < 0x38800000u) return roundEven(x * 16777216.0) * (1.0 / 16777216.0);
    uint rounded = (magnitude + 0xfffu + ((magnitude >> 13) & 1u)) & ~0x1fffu;  // nearest even
    if (rounded > 0x477fe000u) rounded = 0x7f800000u;                           // past 65,504: inf
    return uintBitsToFloat((bits & 0x80000000u) | rounded);
}
#ifdef CM_BF16
// bf16's rounding of an fp32 value, as an fp32 value (bf16 is fp32's upper half).
float cm_round_operand(float x) { return uintBitsToFloat(cm_bf16_bits(x) << 16u); }
#define CM_UNPACK8(word, lo, hi)                                                                      \
    {                                                                                                 \
        const uvec4 cm_w = (word);                                                                    \
        lo = uintBitsToFloat(uvec4(cm_w.x << 16u, cm_w.x & 0xffff0000u, cm_w.y << 16u, cm_w.y & 0xffff0000u)); \
        hi = uintBitsToFloat(uvec4(cm_w.z << 16u, cm_w.z & 0xffff0000u, cm_w.w << 16u, cm_w.w & 0xffff0000u)); \
    }
#else
float cm_round_operand(float x) { return cm_round_f16(x); }
#define CM_UNPACK8(word, lo, hi)                                   \
    {                                                              \
        const uvec4 cm_w = (word);                                 \
        lo = vec4(unpackHalf2x16(cm_w.x), unpackHalf2x16(cm_w.y)); \
        hi = vec4(unpackHalf2x16(cm_w.z), unpackHalf2x16(cm_w.w)); \
    }
#endif
vec4 cm_round_four(vec4 v) {
    return vec4(cm_round_operand(v.x), cm_round_operand(v.y), cm_round_operand(v.z), cm_round_operand(v.w));
}
#define CM_TO_ELEM(value_) cm_round_operand(float(value_))
#define CM_ELEM4 vec4
#define CM_TO_ELEM4(value_) cm_round_four(value_)
#define CM_OPERAND_TILE(name, n) shared float name[n]
#define CM_OPERAND_TILE_SCALAR(name, n) shared float name[n]
#define CM_ACC_TILE(name, n) shared float name[n]
#define CM_ACC_TILE_SCALAR(name, n) shared float name[n]
#define CM_PUT8(tile, i, lo, hi)                         \
    [[unroll]] for (uint cm_c = 0u; cm_c < 4u; ++cm_c) { \
        tile[(i) + cm_c] = (lo)[cm_c];                   \
        tile[(i) + 4u + cm_c] = (hi)[cm_c];              \
    }
#define CM_PUT2(tile, i, x, y)         \
    {                                  \
        tile[i] = CM_TO_ELEM(x);       \
        tile[(i) + 1u] = CM_TO_ELEM(y); \
    }
#define CM_AT(tile, i) tile[i]
#define CM_ROW(t_) (gl_SubgroupInvocationID / CM_LPR + (t_) * (CM_SG / CM_LPR))
#define CM_COL(c_) ((gl_SubgroupInvocationID % CM_LPR) * CM_CPL + (c_))
#define CM_FILL(c, value)                                             \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) c.v[cm_s] = float(value)
#define CM_LOAD_A(a, tile, offset_, stride_)                                                       \
    [[unroll]] for (uint cm_t = 0u; cm_t < CM_RPL; ++cm_t)                                                  \
        [[unroll]] for (uint cm_k = 0u; cm_k < CM_DIM; ++cm_k)                                     \
            a.v[cm_t * CM_DIM + cm_k] = float(tile[(offset_) + CM_ROW(cm_t) * (stride_) + cm_k])
#define CM_COPY_A(a, a2) \
    [[unroll]] for (uint cm_k = 0u; cm_k < CM_RPL * CM_DIM; ++cm_k) a.v[cm_k] = (a2).v[cm_k]
#define CM_LOAD_B(b, tile, offset_, stride_) b = CmB(offset_, stride_, 1u)
#define CM_LOAD_BT(b, tile, offset_, stride_) b = CmB(offset_, 1u, stride_)
#define CM_LOAD_AT(a, tile, offset_, stride_)                                                      \
    [[unroll]] for (uint cm_t = 0u; cm_t < CM_RPL; ++cm_t)                                         \
        [[unroll]] for (uint cm_k = 0u; cm_k < CM_DIM; ++cm_k)                                     \
            a.v[cm_t * CM_DIM + cm_k] = float(tile[(offset_) + cm_k * (stride_) + CM_ROW(cm_t)])
#define CM_LOAD_ACC(c, tile, offset_, stride_)                                                     \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s)                                       \
        c.v[cm_s] = tile[(offset_) + CM_ROW(cm_s / CM_CPL) * (stride_) + CM_COL(cm_s % CM_CPL)]
// The slots are a loop, not unrolled: unrolled, 4 products of 16 × 16 × 16 are ~2,000 FMAs that
// lavapipe's compiler takes a minute over per pipeline.
#define CM_MUL_ADD(c, a, b, tile_b)                                                                \
    [[dont_unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) {                                \
        const uint cm_t = cm_s / CM_CPL, cm_j = CM_COL(cm_s % CM_CPL);                             \
        float cm_sum = c.v[cm_s];                                                                  \
        [[unroll]] for (uint cm_k = 0u; cm_k < CM_DIM; ++cm_k)                                     \
            cm_sum = fma(a.v[cm_t * CM_DIM + cm_k],                                                \
                         float(tile_b[b.offset + cm_k * b.k_stride + cm_j * b.j_stride]), cm_sum); \
        c.v[cm_s] = cm_sum;                                                                        \
    }
#define CM_SCALE(c, s)                                                \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) c.v[cm_s] *= float(s)
#define CM_MUL_ELEMENTS(c, d)                                         \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) c.v[cm_s] *= d.v[cm_s]
#define CM_ADD(c, d)                                                  \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) c.v[cm_s] += d.v[cm_s]
#define CM_STORE(c, tile, offset_, stride_)                                                        \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s)                                       \
        tile[(offset_) + CM_ROW(cm_s / CM_CPL) * (stride_) + CM_COL(cm_s % CM_CPL)] = c.v[cm_s]
// Every tile is fp32 here: an fp32 value takes one slot.
const uint CM_F32_SLOTS = 1u;
#define CM_STORE_F32(c, tile, offset_, stride_) CM_STORE(c, tile, offset_, stride_)
#define CM_F32_AT(tile, i) tile[i]

#endif  // CM_KHR

#define CM_FETCH8(load4, at, d, D, lo, hi)                                                 \
    {                                                                                      \
        lo = CM_TO_ELEM4((d) < (D) ? load4(at, (D) - (d)) : vec4(0.0));                    \
        hi = CM_TO_ELEM4((d) + 4u < (D) ? load4((at) + 4u, (D) - (d) - 4u) : vec4(0.0));   \
    }

#endif  // VKATTN_COOPMAT_GLSL

// Cooperative 16 × 16 × 16 matrix products behind one small interface (issue #33), so that a kernel
// is written once and runs on a GPU's matrix units or, portably, on any device (lavapipe included):
//   CM_KHR defined: GL_KHR_cooperative_matrix, subgroup scope, f16 operands, fp32 accumulators;
//   otherwise:      the portable implementation, from the subgroup's invocations and shared memory.
// A subgroup owns each matrix. Operands come from tiles in shared memory, which the includer
// declares as arrays of CM_ELEM (float16_t for the matrix units; fp32 holding values rounded to
// f16 in the portable implementation, so that both round operands alike) and fills with
// CM_TO_ELEM(x). Accumulators live in registers; their elements reach the kernel only through a
// store into an fp32 shared array (the matrix units spread them over the lanes in an order
// Vulkan does not define).
//
// The operations (macros: GLSL cannot pass a shared array to a function):
//   CmA a; CmB b; CmAcc c;              the types: A 16×16 (rows × k), B 16×16 (k × columns), C
//   CM_FILL(c, value)                   every element of c = value
//   CM_LOAD_A(a, tile, offset, stride)  A's element (i, k) = tile[offset + i·stride + k] (row-major)
//   CM_LOAD_B(b, tile, offset, stride)  B's element (k, j) = tile[offset + k·stride + j] (row-major)
//   CM_MUL_ADD(c, a, tile_a, b, tile_b) c += a·b (tile_a, tile_b: the arrays a and b were loaded from)
//   CM_SCALE(c, s)                      c *= s (a uniform scalar)
//   CM_STORE(c, tile, offset, stride)   tile[offset + i·stride + j] = c's element (i, j), fp32
// Rules for the kernels: a subgroup's lanes all take part in every operation (uniform control
// flow); an operand's tile stays unchanged from its load to its last CM_MUL_ADD (the portable
// operands refer to their tiles, the units' copy them); a CM_STORE's values are visible to the
// other lanes after subgroupMemoryBarrierShared() and subgroupBarrier() (or a workgroup barrier).
// Requires of the includer: CM_SG, the subgroup size the kernel's layout assumes (a constant or a
// specialization constant; the kernel checks gl_SubgroupSize against it).
#ifndef VKATTN_COOPMAT_GLSL
#define VKATTN_COOPMAT_GLSL

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : enable

const uint CM_DIM = 16u;  // M = N = K

#ifdef CM_KHR
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#define CM_ELEM float16_t
#define CM_TO_ELEM(value_) float16_t(value_)
#define CmA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define CmB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define CmAcc coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define CM_FILL(c, value) c = CmAcc(value)
#define CM_LOAD_A(a, tile, offset, stride) coopMatLoad(a, tile, offset, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_B(b, tile, offset, stride) coopMatLoad(b, tile, offset, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_MUL_ADD(c, a, tile_a, b, tile_b) c = coopMatMulAdd(a, b, c)
#define CM_SCALE(c, s) c = c * float(s)
#define CM_STORE(c, tile, offset, stride) coopMatStore(c, tile, offset, stride, gl_CooperativeMatrixLayoutRowMajor)

#else  // the portable implementation

// Operands refer to their tiles; lane l of the subgroup holds the accumulator's elements
// l, l + CM_SG, l + 2·CM_SG, ... in row-major order (CM_SLOTS of them).
const uint CM_SLOTS = (CM_DIM * CM_DIM + CM_SG - 1u) / CM_SG;
struct CmA {
    uint offset, stride;
};
struct CmB {
    uint offset, stride;
};
struct CmAcc {
    float v[CM_SLOTS];
};
#define CM_ELEM float
// f16's rounding of an fp32 value (nearest even; past f16's range, ±inf), as the units' operands.
#define CM_TO_ELEM(value_) unpackHalf2x16(packHalf2x16(vec2(float(value_), 0.0))).x
#define CM_FILL(c, value)                                             \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) c.v[cm_s] = float(value)
#define CM_LOAD_A(a, tile, offset_, stride_) a = CmA(offset_, stride_)
#define CM_LOAD_B(b, tile, offset_, stride_) b = CmB(offset_, stride_)
// Element (i, j) of the lane's slot s: e = lane + s·CM_SG, i = e / 16, j = e % 16 (slots past 256
// where 256 is no multiple of CM_SG compute a harmless copy of row 15's last elements).
// The slots are a loop, not unrolled: unrolled, 4 products of 16 × 16 × 16 are ~2,000 FMAs that
// lavapipe's compiler takes a minute over per pipeline.
#define CM_MUL_ADD(c, a, tile_a, b, tile_b)                                                        \
    [[dont_unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) {                                \
        const uint cm_e = min(gl_SubgroupInvocationID + cm_s * CM_SG, CM_DIM * CM_DIM - 1u);      \
        const uint cm_i = cm_e / CM_DIM, cm_j = cm_e % CM_DIM;                                     \
        float cm_sum = c.v[cm_s];                                                                  \
        [[unroll]] for (uint cm_k = 0u; cm_k < CM_DIM; ++cm_k)                                     \
            cm_sum = fma(float(tile_a[a.offset + cm_i * a.stride + cm_k]),                         \
                         float(tile_b[b.offset + cm_k * b.stride + cm_j]), cm_sum);                \
        c.v[cm_s] = cm_sum;                                                                        \
    }
#define CM_SCALE(c, s)                                                \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) c.v[cm_s] *= float(s)
#define CM_STORE(c, tile, offset_, stride_)                                                        \
    [[unroll]] for (uint cm_s = 0u; cm_s < CM_SLOTS; ++cm_s) {                                     \
        const uint cm_e = gl_SubgroupInvocationID + cm_s * CM_SG;                                  \
        if (cm_e < CM_DIM * CM_DIM) tile[(offset_) + (cm_e / CM_DIM) * (stride_) + cm_e % CM_DIM] = c.v[cm_s]; \
    }

#endif  // CM_KHR

#endif  // VKATTN_COOPMAT_GLSL

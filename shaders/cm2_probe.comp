#version 450
// The workgroup-matrix probe (vkattn/testing/workgroup_matrix_probe.hpp; issue #33): each
// VK_NV_cooperative_matrix2 operation the workgroup-matrix kernels (flash_cm2.comp, bwd_cm2_*.comp,
// bmm_cm2.comp) rely on, alone, on a 64 × 64 f16 matrix X of small integers (so every result is
// exact), each result stored to a region of its own for the host to compare: so that a first run on
// a GPU says which operation a wrong kernel went wrong in. One workgroup, of the smallest size whose
// granularity takes these matrices (workgroup_probe_invocations: NVIDIA's 128).
//   0  X through a transposed view, as B (I·Xᵀ)          1  X as B (I·X)
//   2  X's row maxima into 64 × 16                         3  those widened back to 64 × 64
//   4  X's row sums into 64 × 16                           5  each element's (row, column) as r·64 + c
//   6  X as A, clamped to 50 × 40 (zero past), times I     7  X from row 8 on (an offset of 512), as B
//   8  X through an fp32 accumulator converted to A, times I
//   9  X staged as f16 in shared memory (rows 72 elements apart), loaded as B row-major (STAGED V)
//  10  the same tile loaded column-major (STAGED K: B = Xᵀ)
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require

layout(local_size_x_id = 0) in;
layout(std430, set = 0, binding = 1) readonly buffer XHalves { float16_t x_halves[]; };  // [80][64]
layout(std430, set = 0, binding = 2) writeonly buffer Out { float out_values[]; };

const uint N = 64u, REGION = N * N;
const uint PITCH = N + 8u;        // rows padded by 16 bytes, as flash_cm2.comp's kv_stage
shared uvec4 x_tile[N * PITCH / 8u];  // X as f16 pairs, staged by the invocations (kWorkgroupProbeSharedBytes)
#define ACC(cols) coopmat<float, gl_ScopeWorkgroup, N, cols, gl_MatrixUseAccumulator>
#define MAT_A coopmat<float16_t, gl_ScopeWorkgroup, N, N, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeWorkgroup, N, N, gl_MatrixUseB>

float probe_max(const in float x, const in float y) { return max(x, y); }
float probe_add(const in float x, const in float y) { return x + y; }
float probe_first(const in float x, const in float y) { return x; }
float probe_identity(const in uint r, const in uint c, const in float unused) { return r == c ? 1.0 : 0.0; }
float probe_index(const in uint r, const in uint c, const in float unused) { return float(r * N + c); }
float probe_x(const in uint r, const in uint c, const in float unused) { return float(x_halves[r * N + c]); }
// Stores the element at (r, c) of a matrix `cols` wide into region `region`.
float probe_store(const in uint r, const in uint c, const in float value, const in uint region, const in uint cols) {
    out_values[region * REGION + r * cols + c] = value;
    return value;
}

void main() {
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> whole = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    whole = setTensorLayoutDimensionNV(whole, N, N);
    whole = setTensorLayoutStrideNV(whole, N, 1);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

    ACC(N) ident_acc = ACC(N)(0.0);
    coopMatPerElementNV(ident_acc, ident_acc, probe_identity);
    const MAT_A ident_a = MAT_A(ident_acc);
    const MAT_B ident_b = MAT_B(ident_acc);

    MAT_B xt;
    coopMatLoadTensorNV(xt, x_halves, 0, sliceTensorLayoutNV(whole, 0, N, 0, N), transposed);
    ACC(N) c0 = coopMatMulAdd(ident_a, xt, ACC(N)(0.0));
    coopMatPerElementNV(c0, c0, probe_store, 0u, N);

    MAT_B xb;
    coopMatLoadTensorNV(xb, x_halves, 0, sliceTensorLayoutNV(whole, 0, N, 0, N));
    ACC(N) c1 = coopMatMulAdd(ident_a, xb, ACC(N)(0.0));
    coopMatPerElementNV(c1, c1, probe_store, 1u, N);

    ACC(16) row_max;
    coopMatReduceNV(row_max, c1, gl_CooperativeMatrixReduceRowNV, probe_max);
    coopMatPerElementNV(row_max, row_max, probe_store, 2u, 16u);
    ACC(N) widened;
    coopMatReduceNV(widened, row_max, gl_CooperativeMatrixReduceRowNV, probe_first);
    coopMatPerElementNV(widened, widened, probe_store, 3u, N);
    ACC(16) row_sum;
    coopMatReduceNV(row_sum, c1, gl_CooperativeMatrixReduceRowNV, probe_add);
    coopMatPerElementNV(row_sum, row_sum, probe_store, 4u, 16u);

    ACC(N) index = ACC(N)(0.0);
    coopMatPerElementNV(index, index, probe_index);
    coopMatPerElementNV(index, index, probe_store, 5u, N);

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> part = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    part = setTensorLayoutDimensionNV(part, 50, 40);
    part = setTensorLayoutStrideNV(part, N, 1);
    MAT_A xa;
    coopMatLoadTensorNV(xa, x_halves, 0, sliceTensorLayoutNV(part, 0, N, 0, N));
    ACC(N) c6 = coopMatMulAdd(xa, ident_b, ACC(N)(0.0));
    coopMatPerElementNV(c6, c6, probe_store, 6u, N);

    MAT_B xo;
    coopMatLoadTensorNV(xo, x_halves, 8u * N, sliceTensorLayoutNV(whole, 0, N, 0, N));
    ACC(N) c7 = coopMatMulAdd(ident_a, xo, ACC(N)(0.0));
    coopMatPerElementNV(c7, c7, probe_store, 7u, N);

    ACC(N) x_acc = ACC(N)(0.0);
    coopMatPerElementNV(x_acc, x_acc, probe_x);
    const MAT_A x_conv = MAT_A(x_acc);
    ACC(N) c8 = coopMatMulAdd(x_conv, ident_b, ACC(N)(0.0));
    coopMatPerElementNV(c8, c8, probe_store, 8u, N);

    for (uint w = gl_LocalInvocationIndex; w < N * N / 2u; w += gl_WorkGroupSize.x) {
        const uint at = (2u * w / N) * PITCH / 2u + w % (N / 2u);  // row 2w / N, word w % 32 of it
        x_tile[at >> 2u][at & 3u] = packHalf2x16(vec2(float(x_halves[2u * w]), float(x_halves[2u * w + 1u])));
    }
    barrier();
    MAT_B xs;
    coopMatLoad(xs, x_tile, 0u, PITCH / 8u, gl_CooperativeMatrixLayoutRowMajor);
    ACC(N) c9 = coopMatMulAdd(ident_a, xs, ACC(N)(0.0));
    coopMatPerElementNV(c9, c9, probe_store, 9u, N);
    MAT_B xst;
    coopMatLoad(xst, x_tile, 0u, PITCH / 8u, gl_CooperativeMatrixLayoutColumnMajor);
    ACC(N) c10 = coopMatMulAdd(ident_a, xst, ACC(N)(0.0));
    coopMatPerElementNV(c10, c10, probe_store, 10u, N);
}

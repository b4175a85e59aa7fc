#version 450
// The GEMM ceiling on workgroup-scope matrices (VK_NV_cooperative_matrix2; issue #33,
// docs/design/GPU_KERNELS.md "Workgroup matrices"): bmm.comp's contract (common/bmm_params.glsl) for
// A·B and A·Bᵀ with A and B stored as f16 (cuBLAS hgemm's operands), every addend, chunks of rows and
// GQA indexing; Aᵀ·B and other types are refused on the host. A workgroup owns a BM × BN tile of C
// as one fp32 accumulator; per BK of K, A's and B's slices are tensor loads (zero past the
// tensors' edges) and one product. On the units (CM_KHR) the driver lays the matrices over the
// workgroup and stages the loads: the kernel declares no shared memory; elsewhere common/wg_matrix.glsl's
// portable twin runs the same code, A's and B's slices in shared memory. C leaves through an element
// operation (alpha, the addend, the output's type), each element with its row and column.
#ifdef CM_KHR
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#endif
#extension GL_EXT_control_flow_attributes : enable

#include "common/bmm_params.glsl"

layout(local_size_x_id = 0) in;                  // WM · WN · CM_SG
layout(constant_id = 5) const bool B_TRANSPOSED = true;
layout(constant_id = 8) const uint ADD = 0u;     // 0: nothing; 1: bias[column]; 2: a residual R
layout(constant_id = 12) const uint CM_SG = 32;  // lanes per subgroup: the workgroup's size, not the layout's
layout(constant_id = 13) const uint BK = 32u;    // K per slice, a multiple of 16
layout(constant_id = 14) const uint TM = 4u;     // GemmShape's accumulators per subgroup down and across:
layout(constant_id = 15) const uint TN = 4u;     // with its subgroups they give the tile, BM × BN
layout(constant_id = 16) const uint WM = 2u;
layout(constant_id = 17) const uint WN = 2u;

const uint BM = 16u * TM * WM, BN = 16u * TN * WN, WG = gl_WorkGroupSize.x;

#include "common/wg_matrix.glsl"
WG_HALVES(AHalves, a_halves, 1);
WG_HALVES(BHalves, b_halves, 2);
// The portable implementation's operands (none on the units: the driver stages).
WG_OPERAND_STORAGE(a, BM, BK)
WG_OPERAND_STORAGE(b, BK, BN)
#define OUT_SLOT 3
#include "common/typed_store.glsl"
layout(std430, set = 0, binding = 4) readonly buffer Addend { float addend[]; };  // fp32 bias or residual

uint b_, h_, tile_row, tile_col, row_end;

// C's element (r, c) of the tile: alpha·value and the addend, stored where it lies inside C.
float bmm_store(const in uint r, const in uint c, const in float value) {
    const uint row = tile_row + r, col = tile_col + c;
    if (row < row_end && col < P.N) {
        const float add = ADD == 1u ? addend[col] : ADD == 2u ? addend[tensor_index(P.residual, b_, h_, row) + col] : 0.0;
        store_out(tensor_index(P.c, b_, h_, row) + col, P.alpha * value + add);
    }
    return value;
}

void main() {
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.z;
    b_ = unit / P.heads;
    h_ = unit % P.heads;
    const uint hb = h_ / P.group;
    row_end = min(P.chunk.first_row + P.chunk.rows, P.M);
    tile_row = P.chunk.first_row + gl_WorkGroupID.y * BM;
    tile_col = gl_WorkGroupID.x * BN;

    // A's rows from the tile's first (its offset), B's whole: [K][N], or [N][K] read transposed.
    WG_LAYOUT(a_layout, row_end > tile_row ? row_end - tile_row : 0u, P.K, P.a.stride.z);
    WG_LAYOUT(b_layout, B_TRANSPOSED ? P.N : P.K, B_TRANSPOSED ? P.K : P.N, P.b.stride.z);
    WG_TRANSPOSED(transposed);
    const uint a_at = tensor_index(P.a, b_, h_, tile_row), b_at = tensor_index(P.b, b_, hb, 0u);

    WG_FILLED(c, BM, BN, 0.0);
    for (uint k0 = 0u; k0 < P.K; k0 += BK) {
        WG_LOAD(a, BM, BK, gl_MatrixUseA, a_halves, a_at, a_layout, 0, BM, k0, BK);
        if (B_TRANSPOSED) {  // each branch its product: on the units a load declares its operand
            WG_LOAD_VIEW(b, BK, BN, gl_MatrixUseB, b_halves, b_at, b_layout, tile_col, BN, k0, BK, transposed);
            WG_PRODUCT(c, a, b, BM, BK, BN);
        } else {
            WG_LOAD(b, BK, BN, gl_MatrixUseB, b_halves, b_at, b_layout, k0, BK, tile_col, BN);
            WG_PRODUCT(c, a, b, BM, BK, BN);
        }
    }
    WG_MAP0(c, c, BM, BN, bmm_store);
}

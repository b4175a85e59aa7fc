#version 450
// bmm.comp's contract (common/bmm_params.glsl: forms A·Bᵀ, A·B, Aᵀ·B, every operand type, addends,
// chunks of rows, GQA indexing) on cooperative 16 × 16 × 16 products (common/coopmat.glsl): the
// matrix units' where CM_KHR is defined, the portable implementation otherwise. Operands are
// rounded to f16 as they are staged; products accumulate in fp32.
//   - A workgroup of 4 subgroups owns a (2·SUB) × (2·SUB) tile of C; each subgroup a SUB × SUB
//     quarter as TT × TT accumulators (SUB = 16·TT; TT = 4 on the units, so that every operand a
//     subgroup loads feeds 4 products, 2 in the portable implementation).
//   - K advances BK at a time (16 in the portable implementation, whose fp32 operands must fit
//     lavapipe's 32 KiB; 32 on the units): the workgroup stages A's 2·SUB × BK and B's BK × 2·SUB
//     slices in shared memory, row-major ([m][k], [k][n]) whatever the operands' layouts, then per
//     16 of K each subgroup loads TT A operands and, one at a time, TT B operands, and runs TT²
//     products.
//   - Every load of a slice is issued before its first store, and the next slice's loads are in
//     flight during this slice's products (registers: A_STEPS + B_STEPS chunks of 4), so a slice
//     waits on memory once, behind the products, not once per chunk.
//   - C leaves through a 16 × 16 staging tile per subgroup, one accumulator at a time (the units'
//     accumulator layout is the driver's), where alpha and the addend apply as in bmm.comp.
// A subgroup size other than CM_SG (the pipeline requires it where the device can) writes NaN.
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_basic : require

#include "common/bmm_params.glsl"

layout(local_size_x_id = 0) in;                  // 4 · CM_SG
layout(constant_id = 5) const bool B_TRANSPOSED = true;
layout(constant_id = 8) const uint ADD = 0u;     // 0: nothing; 1: bias[column]; 2: a residual R
layout(constant_id = 9) const uint A_TYPE = 0;   // common/storage_types.glsl
layout(constant_id = 10) const uint B_TYPE = 0;
layout(constant_id = 11) const bool A_TRANSPOSED = false;  // A stored [K][M]
layout(constant_id = 12) const uint CM_SG = 32;  // lanes per subgroup
layout(constant_id = 13) const uint BK = 16u;    // K per slice, a multiple of 16
layout(constant_id = 14) const uint TT = 2u;     // accumulators per side of a subgroup's square of C

#include "common/coopmat.glsl"

const uint NSG = 4u, WG = NSG * CM_SG;
const uint SUB = 16u * TT, BM = 2u * SUB, BN = 2u * SUB;
const uint A_STEPS = (BM * BK / 4u + WG - 1u) / WG, B_STEPS = (BK * BN / 4u + WG - 1u) / WG;
// Row pitches of the slices and of C's tile: 8 elements (16 bytes of f16) past the row, so that
// rows start on different banks; every pitch and every operand's first element are multiples of
// 16 bytes, as the units' loads and stores require.
const uint PITCH_A = BK + 8u, PITCH_B = BN + 8u, PITCH_C = 16u + 4u;

layout(std430, set = 0, binding = 5) readonly buffer Scales { float scales[]; };
float b_scale = 1.0;  // an fp8 B's head's, set once in main
#define TL_NAME load_a4
#define TL_SLOT 1
#define TL_TYPE A_TYPE
#include "common/typed_load.glsl"
#define TL_NAME load_b4
#define TL_SLOT 2
#define TL_TYPE B_TYPE
#define TL_SCALE b_scale
#include "common/typed_load.glsl"

#define OUT_SLOT 3
#include "common/typed_store.glsl"

layout(std430, set = 0, binding = 4) readonly buffer Addend { float addend[]; };  // fp32 bias or residual

// Scalar f16 tiles: as 16-byte words (CM_OPERAND_TILE) this kernel ran 10% slower on an H100 (81
// against 90 TFLOP/s at 8,192³; session 23), unlike flash_coopmat.comp.
CM_OPERAND_TILE_SCALAR(tile_a, BM * PITCH_A);       // [m][k]
CM_OPERAND_TILE_SCALAR(tile_b, BK * PITCH_B);       // [k][n]
CM_ACC_TILE_SCALAR(tile_c, NSG * 16u * PITCH_C);  // [subgroup][16 rows][16 columns]: one accumulator leaving

uint b_, h_, hb_, row_begin, row_end, tile_row, tile_col;

// Slice chunk e (of BM·BK/4) of A: 4 elements along K (row e / (BK/4)), or for Aᵀ along M
// (k e / (BM/4), rows 4·(e % (BM/4))..+3); zeros past K, M, the chunk or the slice. fetch_a loads and
// rounds them; put_a stores them where fetch_a found them.
CM_ELEM4 fetch_a(uint e, uint k0) {
    vec4 v = vec4(0.0);
    if (A_TRANSPOSED) {
        const uint k = k0 + e / (BM / 4u), m = tile_row + 4u * (e % (BM / 4u));
        if (e < BM * BK / 4u && k < P.K && m < row_end) v = load_a4(tensor_index(P.a, b_, h_, k) + m, row_end - m);
    } else {
        const uint m = tile_row + e / (BK / 4u), k = k0 + 4u * (e % (BK / 4u));
        if (e < BM * BK / 4u && m < row_end && k < P.K) v = load_a4(tensor_index(P.a, b_, h_, m) + k, P.K - k);
    }
    return CM_TO_ELEM4(v);
}
void put_a(uint e, CM_ELEM4 v) {
    if (e >= BM * BK / 4u) return;
    if (A_TRANSPOSED) {
        const uint k = e / (BM / 4u), m4 = e % (BM / 4u);
        [[unroll]] for (uint c = 0u; c < 4u; ++c) tile_a[(4u * m4 + c) * PITCH_A + k] = v[c];
    } else {
        const uint r = e / (BK / 4u), k4 = e % (BK / 4u);
        [[unroll]] for (uint c = 0u; c < 4u; ++c) tile_a[r * PITCH_A + 4u * k4 + c] = v[c];
    }
}

// Slice chunk e of B: Bᵀ (stored [N][K]) along K (column e / (BK/4)), B along N (k e / (BN/4)).
CM_ELEM4 fetch_b(uint e, uint k0) {
    vec4 v = vec4(0.0);
    if (B_TRANSPOSED) {
        const uint n = tile_col + e / (BK / 4u), k = k0 + 4u * (e % (BK / 4u));
        if (e < BK * BN / 4u && n < P.N && k < P.K) v = load_b4(tensor_index(P.b, b_, hb_, n) + k, P.K - k);
    } else {
        const uint k = k0 + e / (BN / 4u), n = tile_col + 4u * (e % (BN / 4u));
        if (e < BK * BN / 4u && k < P.K && n < P.N) v = load_b4(tensor_index(P.b, b_, hb_, 0u) + k * P.b.stride.z + n, P.N - n);
    }
    return CM_TO_ELEM4(v);
}
void put_b(uint e, CM_ELEM4 v) {
    if (e >= BK * BN / 4u) return;
    if (B_TRANSPOSED) {
        const uint n = e / (BK / 4u), k4 = e % (BK / 4u);
        [[unroll]] for (uint c = 0u; c < 4u; ++c) tile_b[(4u * k4 + c) * PITCH_B + n] = v[c];
    } else {
        const uint kr = e / (BN / 4u), n4 = e % (BN / 4u);
        [[unroll]] for (uint c = 0u; c < 4u; ++c) tile_b[kr * PITCH_B + 4u * n4 + c] = v[c];
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.z;
    b_ = unit / P.heads;
    h_ = unit % P.heads;
    hb_ = h_ / P.group;
    row_begin = P.chunk.first_row;
    row_end = P.chunk.first_row + P.chunk.rows;
    tile_row = row_begin + gl_WorkGroupID.y * BM;
    tile_col = gl_WorkGroupID.x * BN;
    if (is_fp8(B_TYPE)) b_scale = scales[P.b_scale_at + hb_];
    const uint sub_row = (sg / 2u) * SUB, sub_col = (sg % 2u) * SUB;  // this subgroup's quarter

    CmAcc acc[TT * TT];  // acc[i·TT + j]: rows sub_row + 16i, columns sub_col + 16j
    [[unroll]] for (uint t = 0u; t < TT * TT; ++t) CM_FILL(acc[t], 0.0);

    // The slices: ceil(K / BK), within the loop budget the callers keep (4·budget elements of K).
    CM_ELEM4 a_chunks[A_STEPS];
    CM_ELEM4 b_chunks[B_STEPS];
    CM_LOOP for (uint st = 0u; st < A_STEPS; ++st) a_chunks[st] = fetch_a(tid + st * WG, 0u);
    CM_LOOP for (uint st = 0u; st < B_STEPS; ++st) b_chunks[st] = fetch_b(tid + st * WG, 0u);
    for (uint k0 = 0u; k0 < P.K; k0 += BK) {
        barrier();  // the previous slice's products are done with the tiles
        CM_LOOP for (uint st = 0u; st < A_STEPS; ++st) put_a(tid + st * WG, a_chunks[st]);
        CM_LOOP for (uint st = 0u; st < B_STEPS; ++st) put_b(tid + st * WG, b_chunks[st]);
        barrier();
        if (k0 + BK < P.K) {  // the next slice's loads, in flight during these products
            CM_LOOP for (uint st = 0u; st < A_STEPS; ++st) a_chunks[st] = fetch_a(tid + st * WG, k0 + BK);
            CM_LOOP for (uint st = 0u; st < B_STEPS; ++st) b_chunks[st] = fetch_b(tid + st * WG, k0 + BK);
        }
        CM_LOOP for (uint kk = 0u; kk < BK; kk += 16u) {
            CmA a[TT];
            CM_LOOP for (uint i = 0u; i < TT; ++i) CM_LOAD_A(a[i], tile_a, (sub_row + 16u * i) * PITCH_A + kk, PITCH_A);
            CM_LOOP for (uint j = 0u; j < TT; ++j) {
                CmB b;
                CM_LOAD_B(b, tile_b, kk * PITCH_B + sub_col + 16u * j, PITCH_B);
                CM_LOOP for (uint i = 0u; i < TT; ++i) CM_MUL_ADD(acc[i * TT + j], a[i], b, tile_b);
            }
        }
    }

    // C, one accumulator at a time through the subgroup's staging tile.
    const float alpha = P.alpha;
    const bool layout_ok = gl_SubgroupSize == CM_SG && gl_NumSubgroups == NSG;
    const uint lane = gl_SubgroupInvocationID, c_base = min(sg, NSG - 1u) * 16u * PITCH_C;  // (in bounds on any layout)
    CM_LOOP for (uint t = 0u; t < TT * TT; ++t) {
        subgroupBarrier();  // every lane has read the previous accumulator
        CM_STORE(acc[t], tile_c, c_base, PITCH_C);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint e = lane; e < 256u; e += CM_SG) {
            const uint r = e / 16u, c = e % 16u;
            const uint row = tile_row + sub_row + 16u * (t / TT) + r, col = tile_col + sub_col + 16u * (t % TT) + c;
            if (row >= row_end || row >= P.M || col >= P.N) continue;
            const uint c_row = tensor_index(P.c, b_, h_, row);
            const float add = ADD == 1u ? addend[col] : ADD == 2u ? addend[tensor_index(P.residual, b_, h_, row) + col] : 0.0;
            store_out(c_row + col, layout_ok ? alpha * tile_c[c_base + r * PITCH_C + c] + add : uintBitsToFloat(0x7fc00000u));
        }
    }
}

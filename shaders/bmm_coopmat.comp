#version 450
// bmm.comp's contract (common/bmm_params.glsl: forms A·Bᵀ, A·B, Aᵀ·B, every operand type, addends,
// chunks of rows, GQA indexing) on cooperative 16 × 16 × 16 products (common/coopmat.glsl): the
// matrix units' where CM_KHR is defined, the portable implementation otherwise. Operands are
// rounded to f16 (bf16 where CM_BF16 is defined: what this file says of f16 holds for it) as they
// are staged; products accumulate in fp32. The GEMM ceiling's kernel
// (bench --gemm --gemm-kernel coopmat); its shape is GemmShape's (docs/design/GPU_KERNELS.md,
// "The GEMM's shapes").
//   - A workgroup of WM × WN subgroups owns a BM × BN tile of C; each subgroup a SUB_M × SUB_N
//     part as TM × TN accumulators. Per 16 of K a subgroup loads TM A operands and, one at a
//     time, TN B operands, and runs TM·TN products: (TM + TN) / (TM·TN) operand loads per product.
//   - K advances BK at a time. The workgroup stages A's and B's slices in shared memory as they lie
//     in memory (A [m][k] or Aᵀ [k][m], B [k][n] or Bᵀ [n][k]; the products load the transposed
//     ones column-major), in chunks of 8 elements along a stored row. With WIDE (f16 A and B, rows
//     on 16 bytes; the host's rule) a chunk is one 16-byte load, else two typed loads of 4.
//   - Every load of a slice is issued before its first store, and the next slice's loads are in
//     flight during this slice's products (A_STEPS + B_STEPS chunks per invocation in registers).
//     With STAGES = 2 the slices alternate between two buffers: the next one is stored while the
//     others may still read this one, and one barrier per slice remains (two with STAGES = 1).
//   - C leaves through a 16 × 16 tile per subgroup, one accumulator at a time (the units'
//     accumulator layout is the driver's), where alpha and the addend apply as in bmm.comp. Its
//     tiles take the slices' memory where it fits (C_APART otherwise).
// A subgroup size or count other than the pipeline's (CM_SG lanes, WM·WN subgroups) writes NaN.
#extension GL_EXT_control_flow_attributes : enable
#extension GL_KHR_shader_subgroup_basic : require

#include "common/bmm_params.glsl"

layout(local_size_x_id = 0) in;                  // WM · WN · CM_SG
layout(constant_id = 5) const bool B_TRANSPOSED = true;
layout(constant_id = 8) const uint ADD = 0u;     // 0: nothing; 1: bias[column]; 2: a residual R
layout(constant_id = 9) const uint A_TYPE = 0;   // common/storage_types.glsl
layout(constant_id = 10) const uint B_TYPE = 0;
layout(constant_id = 11) const bool A_TRANSPOSED = false;  // A stored [K][M]
layout(constant_id = 12) const uint CM_SG = 32;  // lanes per subgroup
layout(constant_id = 13) const uint BK = 16u;    // K per slice, a multiple of 16
layout(constant_id = 14) const uint TM = 2u;     // a subgroup's accumulators down C's rows
layout(constant_id = 15) const uint TN = 2u;     // and across its columns
layout(constant_id = 16) const uint WM = 2u;     // subgroups down
layout(constant_id = 17) const uint WN = 2u;     // and across
layout(constant_id = 18) const uint STAGES = 2u; // slices in shared memory, 1 or 2
layout(constant_id = 19) const bool WIDE = false;  // A and B stored as the operands, every stored row on 16 bytes

#include "common/coopmat.glsl"

const uint NSG = WM * WN, WG = NSG * CM_SG;
const uint SUB_M = 16u * TM, SUB_N = 16u * TN, BM = WM * SUB_M, BN = WN * SUB_N;
// The slices as stored: ROWS rows of RUN elements, each 8 elements (16 bytes of f16) past its run
// so that rows start on different banks; every pitch and operand offset is a multiple of 16 bytes,
// as the units' loads require. A slice's buffer is as large as either form needs, whatever the
// form (so the host counts one size for all three).
const uint A_ROWS = A_TRANSPOSED ? BK : BM, A_RUN = A_TRANSPOSED ? BM : BK;
const uint B_ROWS = B_TRANSPOSED ? BN : BK, B_RUN = B_TRANSPOSED ? BK : BN;
const uint PITCH_A = A_RUN + 8u, PITCH_B = B_RUN + 8u, PITCH_C = 16u + 4u;
const uint A_SIZE = BM > BK ? BM * (BK + 8u) : BK * (BM + 8u);  // the larger: the longer side's rows
const uint B_SIZE = BN > BK ? BN * (BK + 8u) : BK * (BN + 8u);
const uint A_CHUNKS = A_ROWS * A_RUN / 8u, B_CHUNKS = B_ROWS * B_RUN / 8u;
const uint A_STEPS = (A_CHUNKS + WG - 1u) / WG, B_STEPS = (B_CHUNKS + WG - 1u) / WG;
const uint C_VALUES = NSG * 16u * PITCH_C;  // the subgroups' C tiles, fp32
const bool C_APART = C_VALUES * CM_F32_SLOTS > STAGES * A_SIZE;

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
// A's and B's bindings again as 16-byte words, for the WIDE loads (Vulkan lets variables alias a binding).
layout(std430, set = 0, binding = 1) readonly buffer AWords4 { uvec4 a_words4[]; };
layout(std430, set = 0, binding = 2) readonly buffer BWords4 { uvec4 b_words4[]; };

#define OUT_SLOT 3
#include "common/typed_store.glsl"

layout(std430, set = 0, binding = 4) readonly buffer Addend { float addend[]; };  // fp32 bias or residual

CM_OPERAND_TILE(tile_a, STAGES * A_SIZE);          // [stage][row][run]; after the last slice, C's tiles from its start
CM_OPERAND_TILE(tile_b, STAGES * B_SIZE);
CM_ACC_TILE_SCALAR(tile_c, C_APART ? C_VALUES : 4u);  // [subgroup][16 rows][16 columns], where apart

uint b_, h_, hb_, row_end, tile_row, tile_col;

// Chunk e of the slice at k0: row r = e / (RUN/8) as stored, elements d..d+7 along it (d = 8·(e %
// (RUN/8))); zeros past K, the chunk's rows, N or the slice. `run_at` is the element's index along
// the run and `run_end` where the run's elements end there.
void fetch_chunk(bool is_a, uint e, uint k0, out CM_ELEM4 lo, out CM_ELEM4 hi) {
    const uint run = is_a ? A_RUN : B_RUN;
    const uint r = e / (run / 8u), d = 8u * (e % (run / 8u));
    uint index, run_at, run_end;
    bool inside;
    if (is_a) {
        const uint m = A_TRANSPOSED ? tile_row + d : tile_row + r, k = A_TRANSPOSED ? k0 + r : k0 + d;
        inside = e < A_CHUNKS && k < P.K && m < row_end;
        index = A_TRANSPOSED ? tensor_index(P.a, b_, h_, k) + m : tensor_index(P.a, b_, h_, m) + k;
        run_at = A_TRANSPOSED ? m : k;
        run_end = A_TRANSPOSED ? row_end : P.K;
    } else {
        const uint n = B_TRANSPOSED ? tile_col + r : tile_col + d, k = B_TRANSPOSED ? k0 + d : k0 + r;
        inside = e < B_CHUNKS && k < P.K && n < P.N;
        index = B_TRANSPOSED ? tensor_index(P.b, b_, hb_, n) + k : tensor_index(P.b, b_, hb_, k) + n;
        run_at = B_TRANSPOSED ? k : n;
        run_end = B_TRANSPOSED ? P.K : P.N;
    }
    if (WIDE) {  // a chunk lies wholly inside or outside (the host's rule)
        const uvec4 none = uvec4(0u);
        if (is_a) {
            CM_UNPACK8(inside ? a_words4[index / 8u] : none, lo, hi)
        } else {
            CM_UNPACK8(inside ? b_words4[index / 8u] : none, lo, hi)
        }
    } else {
        lo = CM_TO_ELEM4(vec4(0.0));
        hi = lo;
        if (inside) {
            if (is_a) {
                CM_FETCH8(load_a4, index, run_at, run_end, lo, hi);
            } else {
                CM_FETCH8(load_b4, index, run_at, run_end, lo, hi);
            }
        }
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.z;
    b_ = unit / P.heads;
    h_ = unit % P.heads;
    hb_ = h_ / P.group;
    row_end = P.chunk.first_row + P.chunk.rows;
    tile_row = P.chunk.first_row + gl_WorkGroupID.y * BM;
    tile_col = gl_WorkGroupID.x * BN;
    if (is_fp8(B_TYPE)) b_scale = scales[P.b_scale_at + hb_];
    const uint sub_row = min(sg / WN, WM - 1u) * SUB_M, sub_col = (sg % WN) * SUB_N;  // this subgroup's part

    CmAcc acc[TM * TN];  // acc[i·TN + j]: rows sub_row + 16i, columns sub_col + 16j
    [[unroll]] for (uint t = 0u; t < TM * TN; ++t) CM_FILL(acc[t], 0.0);

    // A slice's chunks in registers between their loads and their stores.
    CM_ELEM4 a_lo[A_STEPS];
    CM_ELEM4 a_hi[A_STEPS];
    CM_ELEM4 b_lo[B_STEPS];
    CM_ELEM4 b_hi[B_STEPS];
#define FETCH_SLICE(k0)                                                                              \
    CM_LOOP for (uint st = 0u; st < A_STEPS; ++st) fetch_chunk(true, tid + st * WG, k0, a_lo[st], a_hi[st]); \
    CM_LOOP for (uint st = 0u; st < B_STEPS; ++st) fetch_chunk(false, tid + st * WG, k0, b_lo[st], b_hi[st]);
#define PUT_SLICE(stage)                                                                             \
    CM_LOOP for (uint st = 0u; st < A_STEPS; ++st) {                                                 \
        const uint e = tid + st * WG;                                                                \
        if (e < A_CHUNKS) CM_PUT8(tile_a, (stage) * A_SIZE + (e / (A_RUN / 8u)) * PITCH_A + 8u * (e % (A_RUN / 8u)), a_lo[st], a_hi[st]); \
    }                                                                                                \
    CM_LOOP for (uint st = 0u; st < B_STEPS; ++st) {                                                 \
        const uint e = tid + st * WG;                                                                \
        if (e < B_CHUNKS) CM_PUT8(tile_b, (stage) * B_SIZE + (e / (B_RUN / 8u)) * PITCH_B + 8u * (e % (B_RUN / 8u)), b_lo[st], b_hi[st]); \
    }

    // The slices: ceil(K / BK), portably within the loop budget choose_gemm keeps (coopmat_gemm_loops).
    FETCH_SLICE(0u)
    PUT_SLICE(0u)
    barrier();
    uint stage = 0u;
    for (uint k0 = 0u; k0 < P.K; k0 += BK) {
        const bool more = k0 + BK < P.K;
        if (more) {  // the next slice's loads, in flight during these products
            FETCH_SLICE(k0 + BK)
        }
        const uint a_base = stage * A_SIZE, b_base = stage * B_SIZE;
        CM_LOOP for (uint kk = 0u; kk < BK; kk += 16u) {
            CmA a[TM];
            CM_LOOP for (uint i = 0u; i < TM; ++i) {
                if (A_TRANSPOSED) {
                    CM_LOAD_AT(a[i], tile_a, a_base + kk * PITCH_A + sub_row + 16u * i, PITCH_A);
                } else {
                    CM_LOAD_A(a[i], tile_a, a_base + (sub_row + 16u * i) * PITCH_A + kk, PITCH_A);
                }
            }
            CM_LOOP for (uint j = 0u; j < TN; ++j) {
                CmB b;
                if (B_TRANSPOSED) {
                    CM_LOAD_BT(b, tile_b, b_base + (sub_col + 16u * j) * PITCH_B + kk, PITCH_B);
                } else {
                    CM_LOAD_B(b, tile_b, b_base + kk * PITCH_B + sub_col + 16u * j, PITCH_B);
                }
                CM_LOOP for (uint i = 0u; i < TM; ++i) CM_MUL_ADD(acc[i * TN + j], a[i], b, tile_b);
            }
        }
        if (STAGES == 1u) barrier();  // every subgroup is done with the one buffer
        if (more) {
            stage = (stage + 1u) % STAGES;
            PUT_SLICE(stage)
        }
        barrier();  // the slice stored is visible; with two buffers, every subgroup is done with this one
    }

    // C, one accumulator at a time through the subgroup's tile (every subgroup is past the last
    // slice's products: the loop ends on a barrier).
    const float alpha = P.alpha;
    const bool layout_ok = gl_SubgroupSize == CM_SG && gl_NumSubgroups == NSG;
    const uint lane = gl_SubgroupInvocationID, c_base = min(sg, NSG - 1u) * 16u * PITCH_C;  // (in bounds on any layout)
    CM_LOOP for (uint t = 0u; t < TM * TN; ++t) {
        CM_SUBGROUP_SYNC();  // every lane has read the previous accumulator
        if (C_APART) {
            CM_STORE(acc[t], tile_c, c_base, PITCH_C);
        } else {
            CM_STORE_F32(acc[t], tile_a, c_base, PITCH_C);
        }
        CM_SUBGROUP_SYNC();
        for (uint e = lane; e < 256u; e += CM_SG) {
            const uint r = e / 16u, c = e % 16u;
            const uint row = tile_row + sub_row + 16u * (t / TN) + r, col = tile_col + sub_col + 16u * (t % TN) + c;
            if (row >= row_end || row >= P.M || col >= P.N) continue;
            const uint c_row = tensor_index(P.c, b_, h_, row);
            const float add = ADD == 1u ? addend[col] : ADD == 2u ? addend[tensor_index(P.residual, b_, h_, row) + col] : 0.0;
            const float value = C_APART ? tile_c[c_base + r * PITCH_C + c] : CM_F32_AT(tile_a, c_base + r * PITCH_C + c);
            store_out(c_row + col, layout_ok ? alpha * value + add : uintBitsToFloat(0x7fc00000u));
        }
    }
}

#version 450
// Batched, register-blocked matrix product, the workhorse of the three-stage path and the GEMM
// ceiling and the multi-head module's projections:
//   C[u] = alpha · op(A[u]) · op(B[u]) (+ bias or + R),   op(B) = Bᵀ when B_TRANSPOSED (B stored [N][K]),
//                                                          op(A) = Aᵀ when A_TRANSPOSED (A stored [K][M]).
//   stage 1: S = scale · Q · Kᵀ   (A = Q, B = K, transposed), per key slice when K exceeds a binding
//   stage 3: O = P · V           (A = P, B = V), over key slices: O = P_s · V_s + O_(s−1) (ADD = 2)
//   --gemm:  C = A · B            (one unit)
//   linear:  Y = X · Wᵀ + b       (A = X, B = W [out][in] as nn.Linear stores it, HAS_BIAS)
//   backward: dV = Pᵀ·dO, dK = dSᵀ·Q, dW = dYᵀ·X (A_TRANSPOSED, B not), dQ = dS·K, dX = dY·W
// Unit u = b·Hq + h of the chunk; A and C use head h, B uses head h / group (GQA by indexing).
// Each invocation owns TM rows × 4·TN4 columns in registers, fed by vec4 loads along K so that one
// load serves 4·TN4 (or TM) FMAs. Variants (see engine/attention/tuning.cpp):
//   TEXEL (define)       A and B through uniform texel buffers (RGBA32F / RGBA16F views): the
//                        vectorised sampler path; needs 4-aligned rows. Otherwise SSBO words decoded
//                        by type (A_TYPE, B_TYPE spec constants: common/typed_load.glsl), any
//                        storage type (B = K or V may be one of ggml's blocks, or fp8 with its
//                        head's scale from binding 5).
//   OUT_F16/OUT_BF16     C's storage (common/typed_store.glsl).
//   SHARED_TILES (spec)  stage K-slices of A and B through shared memory (GPUs gain; lavapipe loses).
//   A_TRANSPOSED (spec)  A stored [K][M]: each k is an outer product of TM consecutive rows (vec4
//                        loads along M) and 4·TN4 columns of B; B not transposed, no shared tiles,
//                        TM a multiple of 4; a texel A needs M's stride and first element 4-aligned.
#extension GL_EXT_control_flow_attributes : enable

#include "common/bmm_params.glsl"

layout(local_size_x_id = 0) in;                // = WG_M · WG_N
layout(constant_id = 1) const uint WG_M = 8;   // invocations along rows
layout(constant_id = 2) const uint WG_N = 8;   // invocations along columns
layout(constant_id = 3) const uint TM = 4;     // rows per invocation
layout(constant_id = 4) const uint TN4 = 1;    // column vec4s per invocation
layout(constant_id = 5) const bool B_TRANSPOSED = true;
layout(constant_id = 6) const uint SHARED_TILES = 0;  // 0 or 1
layout(constant_id = 7) const uint KS4 = 4;           // vec4s of K per shared tile
layout(constant_id = 8) const uint ADD = 0u;  // 0: nothing; 1: bias[column]; 2: a residual R (addressed by P.residual)
layout(constant_id = 11) const bool A_TRANSPOSED = false;  // ids 9, 10: the word variants' types

const uint TN = 4u * TN4;
const uint BM = WG_M * TM;   // rows per workgroup
const uint BN = WG_N * TN;   // columns per workgroup
const uint CHUNK = 8192u;    // lavapipe ends loops after 65,535 iterations: nest every long loop

#ifdef TEXEL
layout(set = 0, binding = 1) uniform samplerBuffer a_texels;
layout(set = 0, binding = 2) uniform samplerBuffer b_texels;
// `valid` (how many of the 4 are in range) is unused: texel variants need K and N multiples of 4.
vec4 load_a4(uint index, uint valid) { return texelFetch(a_texels, int(index >> 2)); }
vec4 load_b4(uint index, uint valid) { return texelFetch(b_texels, int(index >> 2)); }
#else
layout(constant_id = 9) const uint A_TYPE = 0;   // common/storage_types.glsl
layout(constant_id = 10) const uint B_TYPE = 0;
// An fp8 B's per-head scales (the attention's head terms, vkattn::detail::head_terms_of); read only
// when B is fp8 (bind a placeholder otherwise).
layout(std430, set = 0, binding = 5) readonly buffer Scales { float scales[]; };
float b_scale = 1.0;  // B's head's, set once in main
#define TL_NAME load_a4
#define TL_SLOT 1
#define TL_TYPE A_TYPE
#include "common/typed_load.glsl"
#define TL_NAME load_b4
#define TL_SLOT 2
#define TL_TYPE B_TYPE
#define TL_SCALE b_scale
#include "common/typed_load.glsl"
#endif

#define OUT_SLOT 3
#include "common/typed_store.glsl"

layout(std430, set = 0, binding = 4) readonly buffer Addend { float addend[]; };  // fp32 bias or residual

// Shared K-slices; one element when the variant does not stage (spec-constant arithmetic).
shared vec4 tile_a[1u + SHARED_TILES * (BM * KS4 - 1u)];
shared vec4 tile_b[1u + SHARED_TILES * (BN * KS4 - 1u)];

void main() {
    const uint M = P.M, N = P.N, K = P.K;
    const uint K4 = (K + 3u) / 4u;
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % WG_N, ty = tid / WG_N;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.z;
    const uint b = unit / P.heads, h = unit % P.heads, hb = h / P.group;
    const uint row_begin = P.chunk.first_row, row_end = P.chunk.first_row + P.chunk.rows;
    const uint tile_row = row_begin + gl_WorkGroupID.y * BM;
    const uint tile_col = gl_WorkGroupID.x * BN;
    const uint col0 = tile_col + tx * TN;
#ifndef TEXEL
    if (is_fp8(B_TYPE)) b_scale = scales[P.b_scale_at + hb];
#endif

    // This invocation's rows: strided by WG_M, or TM consecutive ones when A_TRANSPOSED (one vec4
    // load along A's stored rows serves 4 of them).
    const uint row0 = A_TRANSPOSED ? tile_row + ty * TM : tile_row + ty;
    const uint row_step = A_TRANSPOSED ? 1u : WG_M;
    // Clamped addresses: out-of-range rows and columns load valid memory and are never stored.
    uint a_row[TM];
    [[unroll]] for (uint i = 0u; i < TM; ++i)
        a_row[i] = tensor_index(P.a, b, h, min(row0 + i * row_step, row_end - 1u));
    uint b_col[TN];  // B_TRANSPOSED: the start of B row (= C column) col0 + j
    [[unroll]] for (uint j = 0u; j < TN; ++j)
        b_col[j] = tensor_index(P.b, b, hb, min(col0 + j, N - 1u));
    const uint b_head = tensor_index(P.b, b, hb, 0u);
    const uint b_stride = P.b.stride.z;  // hoisted: every uniform-block read is a scalar load on lavapipe

    vec4 acc[TM][TN4];
    [[unroll]] for (uint i = 0u; i < TM; ++i)
        [[unroll]] for (uint j = 0u; j < TN4; ++j) acc[i][j] = vec4(0.0);

    // K vec4s per outer iteration; at most CHUNK, so no loop below runs 65,535 times (P·V over a
    // long key slice has K4 = Nkv / 4).
    const uint step = SHARED_TILES != 0u ? KS4 : min(K4, CHUNK);
    for (uint kt0 = 0u; kt0 < K4; kt0 += CHUNK * step) {
        const uint kt1 = min(K4, kt0 + CHUNK * step);
        for (uint kt = kt0; kt < kt1; kt += step) {
            const uint k_end = min(kt + step, K4);
            if (SHARED_TILES != 0u) {
                barrier();
                for (uint e = tid; e < BM * KS4; e += WG_M * WG_N) {
                    const uint lr = e / KS4, k4 = kt + e % KS4;
                    const uint row = min(tile_row + lr, row_end - 1u);
                    tile_a[e] = k4 < K4 ? load_a4(tensor_index(P.a, b, h, row) + 4u * k4, K - 4u * k4)
                                        : vec4(0.0);
                }
                for (uint e = tid; e < BN * KS4; e += WG_M * WG_N) {
                    if (B_TRANSPOSED) {
                        const uint lc = e / KS4, k4 = kt + e % KS4;
                        const uint col = min(tile_col + lc, N - 1u);
                        tile_b[e] = k4 < K4 ? load_b4(tensor_index(P.b, b, hb, col) + 4u * k4, K - 4u * k4)
                                            : vec4(0.0);
                    } else {  // [k][n/4] layout: KS4·4 rows of BN/4 vec4s
                        const uint k = 4u * kt + e / (BN / 4u), col = tile_col + 4u * (e % (BN / 4u));
                        tile_b[e] = (k < K && col < N) ? load_b4(b_head + k * b_stride + col, N - col)
                                                       : vec4(0.0);
                    }
                }
                barrier();
            }
            for (uint k4 = kt; k4 < k_end; ++k4) {
                if (A_TRANSPOSED) {
                    // A's row k holds C's rows: an outer product of TM of them and TN of B's row k.
                    [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
                        const uint k = 4u * k4 + kk;
                        if (k >= K) break;
                        const uint a_k = tensor_index(P.a, b, h, k);
                        vec4 a4[(TM + 3u) / 4u];
                        [[unroll]] for (uint i4 = 0u; i4 < (TM + 3u) / 4u; ++i4) {
                            // Past M: element 0 of the row, nothing valid; those rows are not stored.
                            const uint m = row0 + 4u * i4;
                            a4[i4] = load_a4(a_k + (m < M ? m : 0u), m < M ? M - m : 0u);
                        }
                        [[unroll]] for (uint j = 0u; j < TN4; ++j) {
                            const uint col = col0 + 4u * j < N ? col0 + 4u * j : 0u;
                            const uint valid = col0 + 4u * j < N ? N - col : 0u;
                            const vec4 bv = load_b4(b_head + k * b_stride + col, valid);
                            [[unroll]] for (uint i = 0u; i < TM; ++i) acc[i][j] += a4[i / 4u][i % 4u] * bv;
                        }
                    }
                    continue;
                }
                const uint kl = k4 - kt;  // index within the shared tile
                vec4 a[TM];
                [[unroll]] for (uint i = 0u; i < TM; ++i)
                    a[i] = SHARED_TILES != 0u ? tile_a[(ty + i * WG_M) * KS4 + kl]
                                              : load_a4(a_row[i] + 4u * k4, K - 4u * k4);
                if (B_TRANSPOSED) {
                    [[unroll]] for (uint j = 0u; j < TN; ++j) {
                        const vec4 bv = SHARED_TILES != 0u ? tile_b[(tx * TN + j) * KS4 + kl]
                                                           : load_b4(b_col[j] + 4u * k4, K - 4u * k4);
                        [[unroll]] for (uint i = 0u; i < TM; ++i) acc[i][j / 4u][j % 4u] += dot(a[i], bv);
                    }
                } else {
                    [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
                        const uint k = min(4u * k4 + kk, K - 1u);  // a[i][kk] is 0 past K
                        [[unroll]] for (uint j = 0u; j < TN4; ++j) {
                            // Past N: load column 0 with nothing valid; those outputs are not stored.
                            const uint col = col0 + 4u * j < N ? col0 + 4u * j : 0u;
                            const uint valid = col0 + 4u * j < N ? N - col : 0u;
                            const vec4 bv = SHARED_TILES != 0u
                                ? tile_b[(kl * 4u + kk) * (BN / 4u) + tx * TN4 + j]
                                : load_b4(b_head + k * b_stride + col, valid);
                            [[unroll]] for (uint i = 0u; i < TM; ++i) acc[i][j] += a[i][kk] * bv;
                        }
                    }
                }
            }
        }
    }

    const float alpha = P.alpha;
    [[unroll]] for (uint i = 0u; i < TM; ++i) {
        const uint row = row0 + i * row_step;
        if (row >= row_end || row >= M) continue;
        const uint c_row = tensor_index(P.c, b, h, row);
        const uint r_row = ADD == 2u ? tensor_index(P.residual, b, h, row) : 0u;
        [[unroll]] for (uint j = 0u; j < TN; ++j) {
            const uint col = col0 + j;
            const float add = ADD == 1u ? addend[col] : ADD == 2u ? addend[r_row + col] : 0.0;
            if (col < N) store_out(c_row + col, alpha * acc[i][j / 4u][j % 4u] + add);
        }
    }
}

#version 450
// The GPUs' matrix product: bmm.comp's contract (common/bmm_params.glsl; the same forms, operand
// types, addends, chunks and GQA indexing) with the tiling of a GPU SGEMM:
//   - a workgroup owns a BM × BN tile of C (128 × 128 at 16 × 16 invocations);
//   - each invocation owns an 8 × 8 micro-tile in registers: rows {4·ty..4·ty+3} and the same 4
//     rows BM/2 further, columns likewise (two vec4 reads per operand per k; a warp's reads of A
//     are a broadcast, of B 16 consecutive vec4s: no bank conflicts);
//   - K advances BK = 4·KS4 elements at a time through shared tiles kept k-major ([k][m], [k][n]),
//     double-buffered: the next slice's global loads are in flight (in registers) while this one's
//     64·BK FMAs run, one barrier per slice.
// Per k and invocation: 4 vec4 shared reads for 64 FMAs (0.25 words per FMA), against bmm.comp's
// 4×4 blocks' 0.5 and its per-k4 tile reloads. Loads along K (A rows, Bᵀ rows) are transposed on
// their way into the tile with a row pitch of BM/4 + 1 vec4s, which keeps the scalar stores of a
// warp on 32 distinct banks (2 lanes per row, 16 rows; the two lanes' k-rows lie 4 rows of
// 4·pitch words apart, ≡ 16 banks mod 32).
// Words only (common/typed_load.glsl): every storage type, f32 read as 4 words per vec4.
#extension GL_EXT_control_flow_attributes : enable

#include "common/bmm_params.glsl"

layout(local_size_x_id = 0) in;                // = WG_M · WG_N
layout(constant_id = 1) const uint WG_M = 16;  // invocations along rows (8 rows each)
layout(constant_id = 2) const uint WG_N = 16;  // invocations along columns (8 columns each)
layout(constant_id = 5) const bool B_TRANSPOSED = true;
layout(constant_id = 7) const uint KS4 = 2;    // vec4s of K per shared slice: BK = 4·KS4
layout(constant_id = 8) const uint ADD = 0u;   // 0: nothing; 1: bias[column]; 2: a residual R
layout(constant_id = 9) const uint A_TYPE = 0;  // common/storage_types.glsl
layout(constant_id = 10) const uint B_TYPE = 0;
layout(constant_id = 11) const bool A_TRANSPOSED = false;  // A stored [K][M]

const uint WG = WG_M * WG_N;
const uint BM = 8u * WG_M, BN = 8u * WG_N, BK = 4u * KS4;
const uint PITCH_A = BM / 4u + 1u, PITCH_B = BN / 4u + 1u;  // vec4s per k row of a tile
// vec4 loads per invocation per slice: BM·BK/4 (and BN·BK/4) spread over the workgroup.
const uint LOADS_A = (BM * KS4 + WG - 1u) / WG, LOADS_B = (BN * KS4 + WG - 1u) / WG;

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

shared vec4 tile_a[2u * BK * PITCH_A];
shared vec4 tile_b[2u * BK * PITCH_B];

// This unit's coordinates and its tile's origin.
uint b_, h_, hb_, row_begin, row_end, tile_row, tile_col;

// Element e of a slice's A tile (e < BM·KS4): along K, the vec4 (row e / KS4, k4 e % KS4), so
// that a warp's 32 lanes read 32 / KS4 rows in full sectors; Aᵀ (stored [K][M]): along M, the
// vec4 (k e / (BM/4), rows 4·(e % (BM/4))..+3). Past K: zeros, selected here (a block type's
// loader decodes a whole block whatever `valid` says). Past M or the chunk: clamped rows, never
// stored.
vec4 fetch_a(uint e, uint k0) {
    if (A_TRANSPOSED) {
        const uint k = k0 + e / (BM / 4u), m = tile_row + 4u * (e % (BM / 4u));
        const bool in_range = k < P.K && m < row_end;
        const vec4 v = load_a4(tensor_index(P.a, b_, h_, in_range ? k : 0u) + (in_range ? m : row_begin),
                               in_range ? row_end - m : 0u);
        return in_range ? v : vec4(0.0);
    }
    const uint m = min(tile_row + e / KS4, row_end - 1u), k = k0 + 4u * (e % KS4);
    const vec4 v = load_a4(tensor_index(P.a, b_, h_, m) + min(k, P.K - 1u), k < P.K ? P.K - k : 0u);
    return k < P.K ? v : vec4(0.0);
}
void store_a(uint slot, uint e, vec4 v) {
    const uint base = slot * BK * PITCH_A;
    if (A_TRANSPOSED) {
        tile_a[base + (e / (BM / 4u)) * PITCH_A + e % (BM / 4u)] = v;
        return;
    }
    const uint m = e / KS4, k = 4u * (e % KS4);
    [[unroll]] for (uint c = 0u; c < 4u; ++c) tile_a[base + (k + c) * PITCH_A + m / 4u][m % 4u] = v[c];
}
// B likewise: Bᵀ (stored [N][K]) along K as A; B (stored [K][N]) along N.
vec4 fetch_b(uint e, uint k0) {
    if (B_TRANSPOSED) {
        const uint n = min(tile_col + e / KS4, P.N - 1u), k = k0 + 4u * (e % KS4);
        const vec4 v = load_b4(tensor_index(P.b, b_, hb_, n) + min(k, P.K - 1u), k < P.K ? P.K - k : 0u);
        return k < P.K ? v : vec4(0.0);
    }
    const uint k = k0 + e / (BN / 4u), n = tile_col + 4u * (e % (BN / 4u));
    const bool in_range = k < P.K && n < P.N;
    const vec4 v = load_b4(tensor_index(P.b, b_, hb_, 0u) + (in_range ? k * P.b.stride.z + n : 0u), in_range ? P.N - n : 0u);
    return in_range ? v : vec4(0.0);
}
void store_b(uint slot, uint e, vec4 v) {
    const uint base = slot * BK * PITCH_B;
    if (!B_TRANSPOSED) {
        tile_b[base + (e / (BN / 4u)) * PITCH_B + e % (BN / 4u)] = v;
        return;
    }
    const uint n = e / KS4, k = 4u * (e % KS4);
    [[unroll]] for (uint c = 0u; c < 4u; ++c) tile_b[base + (k + c) * PITCH_B + n / 4u][n % 4u] = v[c];
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % WG_N, ty = tid / WG_N;
    const uint unit = P.chunk.first_unit + gl_WorkGroupID.z;
    b_ = unit / P.heads;
    h_ = unit % P.heads;
    hb_ = h_ / P.group;
    row_begin = P.chunk.first_row;
    row_end = P.chunk.first_row + P.chunk.rows;
    tile_row = row_begin + gl_WorkGroupID.y * BM;
    tile_col = gl_WorkGroupID.x * BN;
    if (is_fp8(B_TYPE)) b_scale = scales[P.b_scale_at + hb_];

    vec4 acc[8][2];  // rows 4·ty + {0..3} and + BM/2; columns 4·tx + {0..3} and + BN/2
    [[unroll]] for (uint i = 0u; i < 8u; ++i) acc[i][0] = acc[i][1] = vec4(0.0);

    // The first slice into buffer 0. The slice count is ceil(K / BK): the callers keep K within the
    // device's loop budget (4·budget elements, bmm.comp's step), so this loop stays under it.
    const uint slices = (P.K + BK - 1u) / BK;
    vec4 next_a[LOADS_A], next_b[LOADS_B];
    [[unroll]] for (uint l = 0u; l < LOADS_A; ++l) {
        const uint e = tid + l * WG;
        if (e < BM * KS4) store_a(0u, e, fetch_a(e, 0u));
    }
    [[unroll]] for (uint l = 0u; l < LOADS_B; ++l) {
        const uint e = tid + l * WG;
        if (e < BN * KS4) store_b(0u, e, fetch_b(e, 0u));
    }
    barrier();

    for (uint s = 0u; s < slices; ++s) {
        const uint slot = s & 1u;
        const bool more = s + 1u < slices;
        // The next slice's loads go out before this slice's arithmetic and land after it.
        if (more) {
            [[unroll]] for (uint l = 0u; l < LOADS_A; ++l) {
                const uint e = tid + l * WG;
                if (e < BM * KS4) next_a[l] = fetch_a(e, (s + 1u) * BK);
            }
            [[unroll]] for (uint l = 0u; l < LOADS_B; ++l) {
                const uint e = tid + l * WG;
                if (e < BN * KS4) next_b[l] = fetch_b(e, (s + 1u) * BK);
            }
        }
        const uint base_a = slot * BK * PITCH_A, base_b = slot * BK * PITCH_B;
        [[unroll]] for (uint k = 0u; k < BK; ++k) {
            const vec4 a0 = tile_a[base_a + k * PITCH_A + ty], a1 = tile_a[base_a + k * PITCH_A + ty + BM / 8u];
            const vec4 b0 = tile_b[base_b + k * PITCH_B + tx], b1 = tile_b[base_b + k * PITCH_B + tx + BN / 8u];
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                acc[i][0] += a0[i] * b0;
                acc[i][1] += a0[i] * b1;
                acc[i + 4u][0] += a1[i] * b0;
                acc[i + 4u][1] += a1[i] * b1;
            }
        }
        if (more) {
            // The other buffer was last read in slice s - 1, before the barrier that ended it.
            [[unroll]] for (uint l = 0u; l < LOADS_A; ++l) {
                const uint e = tid + l * WG;
                if (e < BM * KS4) store_a(slot ^ 1u, e, next_a[l]);
            }
            [[unroll]] for (uint l = 0u; l < LOADS_B; ++l) {
                const uint e = tid + l * WG;
                if (e < BN * KS4) store_b(slot ^ 1u, e, next_b[l]);
            }
        }
        barrier();
    }

    const float alpha = P.alpha;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        const uint row = tile_row + 4u * ty + (i % 4u) + (i / 4u) * (BM / 2u);
        if (row >= row_end || row >= P.M) continue;
        const uint c_row = tensor_index(P.c, b_, h_, row);
        const uint r_row = ADD == 2u ? tensor_index(P.residual, b_, h_, row) : 0u;
        [[unroll]] for (uint half_ = 0u; half_ < 2u; ++half_) {
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                const uint col = tile_col + 4u * tx + j + half_ * (BN / 2u);
                if (col >= P.N) continue;
                const float add = ADD == 1u ? addend[col] : ADD == 2u ? addend[r_row + col] : 0.0;
                store_out(c_row + col, alpha * acc[i][half_][j] + add);
            }
        }
    }
}

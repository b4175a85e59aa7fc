// The matrix products' tuning (bmm.comp and bmm_tile.comp): the three-stage path's stages and
// softmax, its backward's five products, the multi-head projections and the GEMM ceiling. Pure (no
// Vulkan), so tests drive it with made-up devices; attention/tuning.hpp holds the fused kernels'.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attention/problem.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

struct BmmConfig {
    // bmm_tile.comp (GemmKernel::tile): wg_m × wg_n invocations of 8×8 outputs (tm = 8, tn4 = 2),
    // K slices of 4·ks4 double-buffered in shared memory; word loads. The two fields below are then
    // false. Otherwise bmm.comp.
    bool tile = false;
    // bmm_coopmat.comp (GemmKernel::coopmat): 4 subgroups of `subgroup` lanes (required of the
    // pipeline where `require_subgroup`) own a 64×64 tile as 16×16 cooperative matrices; f16
    // operands, fp32 accumulators. The fields below other than these are then unused.
    bool coopmat = false;
    bool units = false;  // coopmat on the matrix units (DeviceCaps::matrix_units), else portable
    // bmm_coopmat.comp's shape: each subgroup owns coopmat_tiles² accumulators (a square of C
    // 16·coopmat_tiles wide; the workgroup 2 × 2 of them), and K advances coopmat_depth a slice.
    // choose_gemm: 4 and 32 on the units (each operand loaded feeds 4 products), 2 and 16 in the
    // portable implementation (fp32 operands in lavapipe's 32 KiB; its registers).
    std::uint32_t coopmat_tiles = 2, coopmat_depth = 16;
    std::uint32_t subgroup = 0;
    bool require_subgroup = false;
    bool texel = false;         // texel-buffer vec4 loads (else scalar SSBO loads)
    bool shared_tiles = false;  // K-slices staged through shared memory
    std::uint32_t wg_m = 8, wg_n = 8;  // invocations per workgroup along rows and columns
    std::uint32_t tm = 4, tn4 = 1;     // register block: tm rows × 4·tn4 columns per invocation
    std::uint32_t ks4 = 4;             // vec4s of K per shared tile
    std::uint32_t block_rows() const { return coopmat ? 32 * coopmat_tiles : wg_m * tm; }
    std::uint32_t block_cols() const { return coopmat ? 32 * coopmat_tiles : wg_n * 4 * tn4; }
    // Shared memory the kernel declares: bmm_tile.comp's two buffers of 4·ks4 k-rows of A's and
    // B's tiles, each row block/4 + 1 vec4s (the pitch that keeps its transposing stores off bank
    // conflicts); bmm.comp's one K-slice of both tiles, or none.
    std::uint64_t shared_bytes() const;
    std::string describe() const;
};

// Which operand the products read transposed: C = A·Bᵀ (B stored [N][K]: scores, projections), A·B,
// or Aᵀ·B (A stored [K][M]: the backward's dV, dK and weight gradients; bmm.comp stages no shared
// tiles for it).
enum class BmmForm : std::uint8_t { a_bt, a_b, at_b };

struct SoftmaxConfig {
    bool subgroup_ops = true;
    std::uint32_t workgroup = 64;  // a power of two
    std::string describe() const;
};

struct UnfusedConfig {
    BmmConfig scores;  // stage 1: S = scale·Q·Kᵀ
    SoftmaxConfig softmax;
    BmmConfig output;  // stage 3: O = P·V
    std::string describe() const;
};

// The three-stage backward (docs/design/TRAINING.md): per query head of each group and block of
// query rows, S = scale·Q·Kᵀ and dP = dO·Vᵀ (bmm), dS and P̃ in place (bwd_scores.comp), then
// dQ = scale·dS·K, dV += P̃ᵀ·dO and dK += scale·dSᵀ·Q (bmm, the last two with a transposed A).
struct UnfusedBackwardConfig {
    bool texel = false;  // every product reads texels (q, k, v, dO rows on 4 elements; f32/f16)
    BmmConfig scores;    // S and dP: A·Bᵀ
    BmmConfig dq;        // dQ: A·B
    BmmConfig dkv;       // dK, dV: Aᵀ·B
    std::string describe() const;
};
UnfusedBackwardConfig choose_unfused_backward(const vk::DeviceCaps& caps, const Problem& problem,
                                              const std::array<std::int64_t, 4>& q_strides,
                                              const std::array<std::int64_t, 4>& k_strides,
                                              const std::array<std::int64_t, 4>& v_strides,
                                              const std::array<std::int64_t, 4>& grad_out_strides,
                                              const VariantOverrides& overrides);

// The most keys (the inner dimension of dQ = dS·K) and query rows per block (of dK, dV) one bmm
// invocation may loop over on devices with a loop budget (0 = unlimited).
std::int64_t unfused_backward_inner_limit(const vk::DeviceCaps& caps);

// The three-stage path's keys per dispatch under the loop budget (0: no limit).
std::int64_t unfused_keys_per_dispatch(const vk::DeviceCaps& caps, const UnfusedConfig& config);

// Whether rows of `view` can be read as vec4 texels: feature stride 1 and every other stride a
// multiple of 4 elements (so every row starts on a texel).
bool texel_aligned(const std::array<std::int64_t, 4>& strides, std::int64_t row_length);

UnfusedConfig choose_unfused(const vk::DeviceCaps& caps, const Problem& problem,
                             const std::array<std::int64_t, 4>& q_strides,
                             const std::array<std::int64_t, 4>& k_strides,
                             const std::array<std::int64_t, 4>& v_strides,
                             const VariantOverrides& overrides);

// One product of the multi-head layer (its projections Y = X·Wᵀ + b; its backward's dX = dY·W and
// dW = dYᵀ·X): texel loads where `aligned` (every row read through a texel view
// starts on 4 elements and holds a multiple of 4), `types` have float views and the largest operand
// is within the texel limit. A transposed A never stages shared tiles: bmm.comp reads it as an outer
// product, TM rows (a multiple of 4) per vec4.
BmmConfig choose_product(const vk::DeviceCaps& caps, std::initializer_list<DType> types, bool aligned,
                         std::uint64_t largest_operand_bytes, BmmForm form, const VariantOverrides& overrides);

// The GEMM ceiling's configuration: the products' kernel (bmm_tile.comp on GPUs), for one large square
// product; with gemm_kernel = coopmat, bmm_coopmat.comp (InvalidArgument naming variant.gemm_kernel
// where the device has no subgroup size it can run).
BmmConfig choose_gemm(const vk::DeviceCaps& caps, std::int64_t m, std::int64_t n, std::int64_t k,
                      const VariantOverrides& overrides);

}  // namespace vkattn::detail

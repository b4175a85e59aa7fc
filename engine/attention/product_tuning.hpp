// The matrix products' tuning (bmm.comp and bmm_tile.comp): the three-stage path's stages and
// softmax, its backward's five products, the multi-head projections and the GEMM ceiling. Pure (no
// Vulkan), so tests drive it with made-up devices; attention/tuning.hpp holds the fused kernels'.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attention/params.hpp"
#include "attention/problem.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

struct BmmConfig {
    // bmm_tile.comp (GemmKernel::tile): wg_m × wg_n invocations of 8×8 outputs (tm = 8, tn4 = 2),
    // K slices of 4·ks4 double-buffered in shared memory; word loads. The two fields below are then
    // false. Otherwise bmm.comp.
    bool tile = false;
    // bmm_coopmat.comp (GemmKernel::coopmat): 16×16 cooperative matrices, f16 or bf16 operands, fp32
    // accumulators; `coopmat_shape` its subgroups of `subgroup` lanes (required of the pipeline
    // where `require_subgroup`), their accumulators, slice depth and buffers; `coopmat_wide` its
    // 16-byte loads, set by the caller where the operands allow them (coopmat_wide_operands). The
    // fields below other than these are then unused.
    bool coopmat = false;
    bool units = false;  // coopmat on the matrix units (DeviceCaps::matrix_units), else portable
    GemmShape coopmat_shape;
    bool coopmat_wide = false;
    // bmm_cm2.comp instead (VariantOverrides::workgroup_matrices beside GemmKernel::coopmat): the
    // shape's BM × BN tile as one workgroup-scope accumulator, A and B by tensor loads BK deep; the
    // shape's stages and 16-byte loads mean nothing there (choose_workgroup_gemm).
    bool workgroup_matrices = false;
    std::uint32_t subgroup = 0;
    bool require_subgroup = false;
    bool texel = false;         // texel-buffer vec4 loads (else scalar SSBO loads)
    bool shared_tiles = false;  // K-slices staged through shared memory
    std::uint32_t wg_m = 8, wg_n = 8;  // invocations per workgroup along rows and columns
    std::uint32_t tm = 4, tn4 = 1;     // register block: tm rows × 4·tn4 columns per invocation
    std::uint32_t ks4 = 4;             // vec4s of K per shared tile
    std::uint32_t block_rows() const { return coopmat ? 16 * coopmat_shape.tiles_m * coopmat_shape.subgroups_m : wg_m * tm; }
    std::uint32_t block_cols() const { return coopmat ? 16 * coopmat_shape.tiles_n * coopmat_shape.subgroups_n : wg_n * 4 * tn4; }
    std::uint32_t subgroups() const { return coopmat ? coopmat_shape.subgroups_m * coopmat_shape.subgroups_n : 0; }
    // Shared memory the kernel declares: bmm_coopmat.comp's slices of A and B in each of its stages
    // (rows of the stored run plus 8 operands), and C's tiles where they do not fit in A's slices;
    // bmm_tile.comp's two buffers of 4·ks4 k-rows of A's and B's tiles, each row block/4 + 1 vec4s
    // (the pitch that keeps its transposing stores off bank conflicts); bmm.comp's one K-slice of
    // both tiles, or none.
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
// product; with gemm_kernel = coopmat, bmm_coopmat.comp in overrides.gemm_shape's shape or the
// default's (InvalidArgument naming variant.gemm_kernel where the device has no subgroup size it can
// run, variant.gemm_shape where it cannot take the shape; ResourceLimit naming k where the portable
// matrices' loops would pass the device's loop budget).
BmmConfig choose_gemm(const vk::DeviceCaps& caps, std::int64_t m, std::int64_t n, std::int64_t k,
                      const VariantOverrides& overrides);

// bmm_coopmat.comp's loop trips per invocation over K: through the portable matrices
// (common/coopmat.glsl), per slice its chunks' loads and stores and its products (each over the
// lane's 256 / SG slots), then C's stores; on the units, whose loops unroll, the slices and C's
// stores. choose_gemm refuses K past a device's loop budget with it (ResourceLimit naming k).
std::int64_t coopmat_gemm_loops(const BmmConfig& c, std::int64_t k);
// ResourceLimit naming k where a GEMM's `trips` (its kernel's loop count for K = `k`) pass the
// device's loop budget, `kernel` named; nothing on devices without one.
void refuse_gemm_past_loop_budget(const vk::DeviceCaps& caps, std::int64_t trips, std::int64_t k, const std::string& kernel);

// The attention paths' refusal of overrides.gemm_shape (the GEMM ceiling's knob alone).
void refuse_gemm_shape(const VariantOverrides& overrides);

// Whether bmm_coopmat.comp in `c`'s shape may load A and B 16 bytes at a time (c.coopmat_wide): the
// shape asks for it, both are f16 or both bf16 (then the operands' type), the form stages them along rows (not Aᵀ·B, whose chunks run
// along the rows of C), and every row starts on 16 bytes and holds whole chunks of 8 (K, and N for
// A·B).
bool coopmat_wide_operands(const BmmConfig& c, BmmForm form, DType a, DType b, const TensorDesc& a_desc,
                           const TensorDesc& b_desc, std::int64_t n, std::int64_t k);

}  // namespace vkattn::detail

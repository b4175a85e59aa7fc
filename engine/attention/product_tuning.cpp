#include "attention/product_tuning.hpp"

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <tuple>

#include "attention/ceil_div.hpp"
#include "attention/coopmat_tile.hpp"
#include "attention/decode.hpp"
#include "attention/workgroup_matrices.hpp"
#include "attention/device_rules.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// A GPU SGEMM's tiling (bmm_tile.comp): 16×16 invocations of 8×8 outputs, a 128×128 tile per
// workgroup, K in slices of 8. Per k an invocation reads 4 vec4s from shared memory for 64 FMAs;
// ~110 registers (64 accumulators, 16 operands, 8 prefetched) leave two workgroups per 64K-register
// SM. Devices with fewer than 256 invocations or too little shared memory get 8×8 invocations
// (64×64 tiles); none where even those do not fit (below Vulkan's 16 KiB minimum).
std::optional<BmmConfig> tile_bmm(const vk::DeviceCaps& caps) {
    BmmConfig c;
    c.tile = true;
    c.wg_m = c.wg_n = 16;
    c.tm = 8;
    c.tn4 = 2;
    c.ks4 = 2;
    if (caps.max_workgroup_invocations < 256 || c.shared_bytes() > caps.max_shared_bytes) c.wg_m = c.wg_n = 8;
    if (c.shared_bytes() > caps.max_shared_bytes) return std::nullopt;
    return c;
}

// What is wrong with a GEMM shape whatever the device (each field's range before any product, so
// that no product wraps), or nothing.
std::string gemm_shape_fault(const GemmShape& s) {
    const auto within = [](std::uint32_t v) { return v >= 1 && v <= 16; };
    if (!within(s.subgroups_m) || !within(s.subgroups_n) || s.subgroups_m * s.subgroups_n > 16)
        return " has " + std::to_string(s.subgroups_m) + "x" + std::to_string(s.subgroups_n) + " subgroups; 1 to 16 in all.";
    if (!within(s.tiles_m) || !within(s.tiles_n) || s.tiles_m * s.tiles_n > 16)
        return " gives each subgroup " + std::to_string(s.tiles_m) + "x" + std::to_string(s.tiles_n) +
               " accumulators; 1 to 16 (128 registers on the units).";
    if (s.depth < 16 || s.depth > 128 || s.depth % 16 != 0)
        return " stages K " + std::to_string(s.depth) + " deep; a multiple of 16 from 16 to 128.";
    if (s.stages < 1 || s.stages > 2) return " has " + std::to_string(s.stages) + " stages; 1 or 2.";
    return {};
}

BmmConfig base_bmm(const vk::DeviceCaps& caps, bool texel, const VariantOverrides& overrides) {
    refuse_gemm_shape(overrides);
    // shared_tiles and a forced texel_loads are bmm.comp's knobs: setting one asks for it.
    const bool blocks_asked = overrides.shared_tiles.has_value() || overrides.texel_loads == true;
    const GemmKernel chosen = is_cpu(caps) || blocks_asked ? GemmKernel::blocks : GemmKernel::tile;
    if (overrides.gemm_kernel == GemmKernel::coopmat)
        throw InvalidArgument("variant.gemm_kernel", "the cooperative-matrix products (16-bit operands) serve only the GEMM "
                                                     "ceiling for now (issue #33); the attention paths and the "
                                                     "projections take blocks or tile.");
    if (overrides.gemm_kernel.value_or(chosen) == GemmKernel::tile)
        if (const std::optional<BmmConfig> tile = tile_bmm(caps)) return *tile;  // else bmm.comp (describe() says)
    BmmConfig c;
    c.texel = texel;
    // CPU devices (lavapipe): every shared-memory access is a scalar loop over the lanes and
    // barrier() is a coroutine switch, so registers fed by texel loads win (LAVAPIPE.md: 25-40 vs
    // 8-14 GFLOP/s). GPUs that ask for bmm.comp: staging K-slices in shared memory saves global
    // bandwidth.
    c.shared_tiles = overrides.shared_tiles.value_or(!is_cpu(caps));
    if (is_cpu(caps)) {
        // 8×8 outputs per invocation, 64 invocations: each vec4 load feeds 32 FMAs, and 64
        // accumulators stay in AVX registers.
        c.wg_m = 8;
        c.wg_n = 8;
        c.tm = 8;
        c.tn4 = 2;
    } else {
        // 64 invocations × 4×4 outputs: a 32×32 tile, small enough to fill any GPU at modest
        // sizes, few enough registers for high occupancy.
        c.wg_m = 8;
        c.wg_n = 8;
        c.tm = 4;
        c.tn4 = 1;
    }
    c.ks4 = 4;
    // Shared tiles must fit the device: (rows + columns) · ks4 vec4s.
    while (c.shared_bytes() > caps.max_shared_bytes && c.ks4 > 1) c.ks4 /= 2;
    if (c.shared_bytes() > caps.max_shared_bytes) c.shared_tiles = false;  // too small
    return c;
}

// bmm.comp reads a transposed A as an outer product: TM (a multiple of 4) consecutive rows per
// vec4 load, never through shared tiles.
BmmConfig transposed_a(BmmConfig c) {
    if (c.tile) return c;  // bmm_tile.comp stages Aᵀ's rows as they lie
    c.shared_tiles = false;
    c.tm = std::max<std::uint32_t>(4, c.tm / 4 * 4);
    return c;
}

}  // namespace

bool texel_aligned(const std::array<std::int64_t, 4>& strides, std::int64_t row_length) {
    return strides[3] == 1 && row_length % 4 == 0 && strides[0] % 4 == 0 && strides[1] % 4 == 0 &&
           strides[2] % 4 == 0;
}

std::uint64_t BmmConfig::shared_bytes() const {
    // bmm_coopmat.comp: per stage A's and B's slices, each as large as either form's rows need (f16
    // or bf16 on the units; fp32 holding such values in the portable implementation), and the subgroups'
    // 16×20 fp32 tiles for C, which take A's slices where they fit (C's own tile is then a 16-byte
    // placeholder).
    if (coopmat) {
        const std::uint64_t depth = coopmat_shape.depth, rows = block_rows(), cols = block_cols();
        const auto slice = [depth](std::uint64_t side) { return side > depth ? side * (depth + 8) : depth * (side + 8); };
        const std::uint64_t a_bytes = std::uint64_t{coopmat_operand_bytes(units)} * coopmat_shape.stages * slice(rows);
        const std::uint64_t b_bytes = std::uint64_t{coopmat_operand_bytes(units)} * coopmat_shape.stages * slice(cols);
        const std::uint64_t c_bytes = std::uint64_t{subgroups()} * 16 * 20 * 4;
        return a_bytes + b_bytes + (c_bytes > a_bytes ? c_bytes : 16);
    }
    if (tile) return 2ull * 4 * ks4 * (block_rows() / 4 + 1 + block_cols() / 4 + 1) * 16;
    return shared_tiles ? std::uint64_t{block_rows() + block_cols()} * ks4 * 16 : 0;
}

std::string BmmConfig::describe() const {
    if (coopmat && workgroup_matrices)
        return std::string("coopmat[workgroup ") + (units ? "" : "portable ") + "sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") + " shape " + to_string(coopmat_shape) +
               ": " + std::to_string(block_rows()) + "x" + std::to_string(block_cols()) + "x" + std::to_string(coopmat_shape.depth) +
               " tensor loads ->f32]";
    if (coopmat)
        return std::string("coopmat[") + (units ? "units" : "portable") + " sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") +
               " shape " + to_string(coopmat_shape) + ": " + std::to_string(block_rows()) + "x" + std::to_string(block_cols()) + "x" +
               std::to_string(coopmat_shape.depth) + (coopmat_wide ? " 16-byte loads" : " typed loads") + " ->f32]";
    if (tile) return "tile " + std::to_string(wg_m) + "x" + std::to_string(wg_n) + "/8x8";
    return std::string(texel ? "texel" : "words") + (shared_tiles ? "/shared" : "/regs") + " " +
           std::to_string(tm) + "x" + std::to_string(4 * tn4);
}

std::string SoftmaxConfig::describe() const { return subgroup_ops ? "subgroup" : "shared-tree"; }

std::string UnfusedConfig::describe() const {
    return "unfused scores[" + scores.describe() + "] softmax[" + softmax.describe() + "] output[" +
           output.describe() + "]";
}

UnfusedConfig choose_unfused(const vk::DeviceCaps& caps, const Problem& p,
                             const std::array<std::int64_t, 4>& q_strides,
                             const std::array<std::int64_t, 4>& k_strides,
                             const std::array<std::int64_t, 4>& v_strides,
                             const VariantOverrides& overrides) {
    UnfusedConfig c;
    const bool want_texel = overrides.texel_loads.value_or(true);
    // Stage 1 reads Q and K rows along Dk; stage 3 reads P rows along Nkv and V rows along Dv.
    // A stage whose rows are not 4-aligned, or whose operands are not f32/f16, reads words instead;
    // describe() reports it.
    const bool scores_texel = want_texel && texel_supported(caps, p.dtype) && texel_supported(caps, p.k_dtype) &&
                              texel_aligned(q_strides, p.Dk) && texel_aligned(k_strides, p.Dk);
    const bool output_texel = want_texel && texel_supported(caps, p.v_dtype) && caps.texel_rgba32f &&
                              p.Nkv % 4 == 0 && texel_aligned(v_strides, p.Dv);
    c.scores = base_bmm(caps, scores_texel, overrides);
    c.output = base_bmm(caps, output_texel, overrides);
    // Subgroup reductions where the device has them; the shared-memory tree otherwise.
    c.softmax.subgroup_ops = overrides.subgroup_ops.value_or(caps.subgroup_arithmetic) && caps.subgroup_arithmetic;
    // 64 invocations: 8 AVX lanes × 8 subgroups on lavapipe, 1-2 warps/wavefronts on GPUs.
    c.softmax.workgroup = 64;
    while (c.softmax.workgroup > caps.max_workgroup_invocations) c.softmax.workgroup /= 2;
    return c;
}

std::string UnfusedBackwardConfig::describe() const {
    return "unfused-backward[S,dP " + scores.describe() + " dQ " + dq.describe() + " dK,dV " + dkv.describe() + "]";
}

UnfusedBackwardConfig choose_unfused_backward(const vk::DeviceCaps& caps, const Problem& p,
                                              const std::array<std::int64_t, 4>& q_strides,
                                              const std::array<std::int64_t, 4>& k_strides,
                                              const std::array<std::int64_t, 4>& v_strides,
                                              const std::array<std::int64_t, 4>& grad_out_strides,
                                              const VariantOverrides& overrides) {
    // One load rule for all five products (bmm.comp's TEXEL applies to both operands): the score
    // scratch is f32 with rows padded to 4, so texels need only q, k, v and dO rows on 4 elements.
    UnfusedBackwardConfig c;
    c.texel = overrides.texel_loads.value_or(true) && caps.texel_rgba32f && texel_supported(caps, p.dtype) &&
              texel_supported(caps, p.k_dtype) && texel_supported(caps, p.v_dtype) && texel_aligned(q_strides, p.Dk) &&
              texel_aligned(k_strides, p.Dk) && texel_aligned(v_strides, p.Dv) && texel_aligned(grad_out_strides, p.Dv);
    c.scores = base_bmm(caps, c.texel, overrides);
    c.texel = c.scores.texel;  // bmm_tile.comp reads words
    c.dq = c.scores;
    c.dkv = transposed_a(c.scores);
    return c;
}

std::int64_t unfused_backward_inner_limit(const vk::DeviceCaps& caps) {
    // bmm.comp's K loop steps a vec4 of the inner dimension per iteration.
    return caps.max_loop_iterations == 0 ? 0 : 4 * loop_budget(caps);
}

std::int64_t unfused_keys_per_dispatch(const vk::DeviceCaps& caps, const UnfusedConfig& c) {
    if (caps.max_loop_iterations == 0) return 0;
    const std::int64_t by_pv = 4 * loop_budget(caps);
    const std::int64_t by_softmax = loop_budget(caps) / 2 * c.softmax.workgroup;
    return std::min(by_pv, by_softmax) / 64 * 64;
}

std::int64_t coopmat_gemm_loops(const BmmConfig& c, std::int64_t k) {
    // llvmpipe's count (docs/LAVAPIPE.md): a loop of n trips makes n + 1 (the last finds every lane
    // done), and each loop inside a pass that no lane runs (that last one, or an if no lane takes)
    // makes 1. So a loop of n trips whose body holds loops costing `inner` and `masked` costs
    // n + 1 + n · inner + masked, and masked, once, the number of loops it holds and itself.
    const auto loop = [](std::int64_t n, std::int64_t inner, std::int64_t masked) { return n + 1 + n * inner + masked; };
    const GemmShape& s = c.coopmat_shape;
    const std::int64_t slices = ceil_div(k, std::int64_t{s.depth}), tiles = std::int64_t{s.tiles_m} * s.tiles_n;
    const std::int64_t stores = loop(tiles, loop(ceil_div(256, std::int64_t{c.subgroup}), 0, 0), 1);  // C's tiles, a lane's elements
    if (c.units) return loop(slices, 0, 0) + stores;  // CM_LOOP unrolls there
    const std::int64_t invocations = std::int64_t{c.subgroups()} * c.subgroup, slots = std::max<std::int64_t>(1, 256 / c.subgroup);
    const std::int64_t slice = loop(ceil_div(std::int64_t{c.block_rows()} * s.depth / 8, invocations), 0, 0) +  // A's 8-element chunks
                               loop(ceil_div(std::int64_t{c.block_cols()} * s.depth / 8, invocations), 0, 0);   // B's
    const std::int64_t product = loop(s.tiles_m, loop(slots, 0, 0), 1);                 // acc[i][j] += a[i]·b, over the slots
    const std::int64_t columns = loop(s.tiles_n, product, 2);                           // each b
    const std::int64_t steps = loop(s.depth / 16, loop(s.tiles_m, 0, 0) + columns, 4);  // A's operands, then the columns
    // Before the loop the first slice fetched and stored; each slice the next fetched and stored
    // (the last slice's fetch and store are masked: 4 passes, counted in full, which over-counts)
    // and this one's products; the pass that ends the loop runs its 9 loops masked.
    return 2 * slice + loop(slices, 2 * slice + steps, 9) + stores;
}

void refuse_gemm_past_loop_budget(const vk::DeviceCaps& caps, std::int64_t trips, std::int64_t k, const std::string& kernel) {
    if (caps.max_loop_iterations > 0 && trips > loop_budget(caps))
        throw ResourceLimit("k: K = " + std::to_string(k) + " takes " + kernel + " " + std::to_string(trips) + " loop trips, past the " +
                            std::to_string(loop_budget(caps)) + " this device's shaders may make (their loops stop after " +
                            std::to_string(caps.max_loop_iterations) + ").");
}

namespace {
// bmm_coopmat.comp within the device's loop budget, or ResourceLimit naming k.
const BmmConfig& within_loop_budget(const BmmConfig& c, const vk::DeviceCaps& caps, std::int64_t k) {
    refuse_gemm_past_loop_budget(caps, coopmat_gemm_loops(c, k), k, "the cooperative-matrix GEMM");
    return c;
}
}  // namespace

BmmConfig choose_gemm(const vk::DeviceCaps& caps, std::int64_t m, std::int64_t n, std::int64_t k,
                      const VariantOverrides& overrides) {
    (void)m;
    refuse_workgroup_without_coopmat(overrides.workgroup_matrices, overrides.gemm_kernel == GemmKernel::coopmat, "gemm_kernel");
    if (overrides.gemm_kernel == GemmKernel::coopmat) {
        std::string why;
        const auto subgroup = kernel_subgroup(caps, why);
        if (!subgroup) throw InvalidArgument("variant.gemm_kernel", "the cooperative-matrix products cannot run here: " + why + ".");
        BmmConfig c;
        c.coopmat = true;
        c.units = caps.matrix_units;
        std::tie(c.subgroup, c.require_subgroup) = *subgroup;
        // The ceiling's operands are the caller's (f16 unless bench --gemm-operands bf16); bf16 ones on
        // units in parts would need a 16 × 16 × 16 bf16 shape, which such devices do not list.
        matrix_parts_subgroup(caps, {DType::f16}, overrides.workgroup_matrices.value_or(false), c.subgroup, c.require_subgroup);
        const auto fits = [&] {
            return c.subgroups() * c.subgroup <= caps.max_workgroup_invocations && c.shared_bytes() <= caps.max_shared_bytes;
        };
        const auto needs = [&] {
            return " needs " + std::to_string(c.subgroups()) + " subgroups of " + std::to_string(c.subgroup) + " lanes and " +
                   std::to_string(c.shared_bytes()) + " bytes of shared memory; the device has " +
                   std::to_string(caps.max_workgroup_invocations) + " invocations and " + std::to_string(caps.max_shared_bytes) + " bytes.";
        };
        const bool workgroup = overrides.workgroup_matrices.value_or(false);
        if (overrides.gemm_shape) {
            c.coopmat_shape = *overrides.gemm_shape;
            const std::string named = "the cooperative-matrix GEMM's shape " + to_string(c.coopmat_shape);
            if (const std::string fault = gemm_shape_fault(c.coopmat_shape); !fault.empty())
                throw InvalidArgument("variant.gemm_shape", named + fault);
            if (workgroup) {  // bmm_cm2.comp stages nothing of its own: choose_workgroup_gemm checks what it needs
                choose_workgroup_gemm(c, caps, k);
                return c;
            }
            if (!fits()) throw InvalidArgument("variant.gemm_shape", named + needs());
            return within_loop_budget(c, caps, k);
        }
        if (workgroup) {  // the default shape's 128 × 128 tile, 32 deep, on 4 subgroups
            c.coopmat_shape = GemmShape{};
            choose_workgroup_gemm(c, caps, k);
            return c;
        }
        // Chosen: the first that fits. On the units 128 × 128 tiles of 4 × 4 accumulators per
        // subgroup (each operand loaded feeds 4 products), 32-deep slices in two buffers, or one
        // (devices of 32 KiB); portably 64 × 64 of 2 × 2, 16 deep (fp32 operands in lavapipe's 32 KiB;
        // its registers). Unmeasured against the other shapes (docs/design/GPU_KERNELS.md, "The
        // GEMM's shapes").
        static const GemmShape units_order[] = {GemmShape{}, {2, 2, 4, 4, 32, 1, true}, {2, 2, 2, 2, 16, 2, true},
                                                {2, 2, 2, 2, 16, 1, true}};  // GemmShape{}: 2x2,4x4,32,2
        static const GemmShape portable_order[] = {{2, 2, 2, 2, 16, 2, true}, {2, 2, 2, 2, 16, 1, true}};
        for (const GemmShape& shape : c.units ? std::span<const GemmShape>(units_order) : std::span<const GemmShape>(portable_order)) {
            c.coopmat_shape = shape;
            if (fits()) return within_loop_budget(c, caps, k);
        }
        throw InvalidArgument("variant.gemm_kernel", "the cooperative-matrix products at their smallest shape, " +
                                                         to_string(c.coopmat_shape) + "," + needs());
    }
    const bool texel = overrides.texel_loads.value_or(true) && caps.texel_rgba32f && n % 4 == 0 && k % 4 == 0;
    return base_bmm(caps, texel, overrides);
}

void refuse_gemm_shape(const VariantOverrides& overrides) {
    if (overrides.gemm_shape)
        throw InvalidArgument("variant.gemm_shape", "shapes the cooperative-matrix GEMM (gemm_kernel = coopmat, the GEMM "
                                                    "ceiling's: bench --gemm --gemm-kernel coopmat) alone; the other product "
                                                    "kernels, the attention paths and the projections "
                                                    "have no use for it.");
}

bool coopmat_wide_operands(const BmmConfig& c, BmmForm form, DType a, DType b, const TensorDesc& a_desc,
                           const TensorDesc& b_desc, std::int64_t n, std::int64_t k) {
    return c.coopmat && !c.workgroup_matrices && c.coopmat_shape.wide && form != BmmForm::at_b && a == b && (a == DType::f16 || a == DType::bf16) &&
           decode_wide_rows(a_desc, a, k) && decode_wide_rows(b_desc, b, form == BmmForm::a_bt ? k : n);
}

BmmConfig choose_product(const vk::DeviceCaps& caps, std::initializer_list<DType> types, bool aligned,
                         std::uint64_t largest_operand_bytes, BmmForm form, const VariantOverrides& overrides) {
    bool texel = overrides.texel_loads.value_or(true) && aligned;
    for (const DType t : types)
        texel = texel && texel_supported(caps, t) && largest_operand_bytes <= caps.max_texel_buffer_elements * texel_bytes(t);
    const BmmConfig c = base_bmm(caps, texel, overrides);
    return form == BmmForm::at_b ? transposed_a(c) : c;
}

}  // namespace vkattn::detail

#include "attention/tuning.hpp"

#include <algorithm>
#include <bit>
#include <optional>
#include <tuple>
#include <utility>

#include "attention/device_rules.hpp"
#include "attention/workgroup_matrices.hpp"
#include "tensor/storage_rules.hpp"

namespace vkattn::detail {

std::string FusedConfig::describe() const {
    if (coopmat)
        return "coopmat[words sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") + "x" + std::to_string(subgroups) +
               " rows" + std::to_string(rows_per_workgroup()) + " " + coopmat->describe() +
               (column_passes > 1 ? " passes=" + std::to_string(column_passes) : "") + "]";
    if (tile)
        return "tile[words sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") + "x" + std::to_string(subgroups) +
               " rows" + std::to_string(rows_per_workgroup()) + " keys" + std::to_string(key_block()) + " " + tile->describe() +
               (column_passes > 1 ? " passes=" + std::to_string(column_passes) : "") + "]";
    if (decode)
        return "decode[words sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") + "x" + std::to_string(subgroups) +
               " rows" + std::to_string(rows) + " keys" + std::to_string(key_block()) + " " + decode->describe() + "]";
    return std::string("fused[") + (texel_words ? "texel-words" : texel ? "texel" : "words") + " sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") +
           "x" + std::to_string(subgroups) + " rows" + std::to_string(rows) + " keys" + std::to_string(key_block()) +
           " dv4=" + std::to_string(dv4) + (column_passes > 1 ? " passes=" + std::to_string(column_passes) : "") +
           (staged ? " staged kd4=" + std::to_string(kd4) : " streamed") + "]";
}

namespace {
// Whether a knob only the register kernels read (flash.comp's staging, its backward's, texel loads)
// is forced: then neither the tile nor the cooperative-matrix kernels are chosen.
bool register_knobs_forced(const VariantOverrides& overrides) {
    return overrides.shared_tiles.has_value() || overrides.texel_loads == true;
}

// The flash kernels' loads (choose_fused, choose_backward): float texel views where q, k and v all
// have them, else words through R32_UINT views; both need every row read through them to start on 4
// elements (`aligned`); storage-buffer words otherwise. Returns (texel, texel_words).
std::pair<bool, bool> flash_loads(const vk::DeviceCaps& caps, const Problem& p, bool aligned, const VariantOverrides& overrides) {
    const bool float_views = texel_supported(caps, p.dtype) && texel_supported(caps, p.k_dtype) &&
                             texel_supported(caps, p.v_dtype);
    const bool texel = overrides.texel_loads.value_or(true) && aligned && (float_views || caps.texel_r32ui);
    return {texel, texel && !float_views};
}

// Rows (or keys) per subgroup for a unit that has `have` of them: the next power of two, at most
// `most` (so that units with few rows share few pipelines).
std::uint32_t fitted_rows(std::int64_t have, std::uint32_t most) {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(most, std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(1, have)))));
}
}  // namespace

std::optional<FusedConfig> choose_fused(const vk::DeviceCaps& caps, const Problem& p,
                                        const std::array<std::int64_t, 4>& q_strides,
                                        const std::array<std::int64_t, 4>& k_strides,
                                        const std::array<std::int64_t, 4>& v_strides,
                                        const VariantOverrides& overrides, std::string* why) {
    auto refuse = [&](const std::string& reason) -> std::optional<FusedConfig> {
        if (why) *why = reason;
        return std::nullopt;
    };
    refuse_workgroup_without_coopmat(overrides.workgroup_matrices, overrides.fused_kernel == FusedKernel::coopmat, "fused_kernel");
    std::string reason;
    const auto subgroup = kernel_subgroup(caps, reason);
    if (!subgroup) return refuse(reason);
    if (overrides.subgroup_ops == false) return refuse("subgroup operations were disabled, and the fused kernel needs them");
    if (p.Dk > 512 || p.Dv > 512) return refuse("head dimensions above 512 are not supported by the fused kernel");
    FusedConfig c;
    std::tie(c.subgroup, c.require_subgroup) = *subgroup;
    // 64-key blocks and 64-invocation workgroups (LAVAPIPE.md: 8 subgroups × 8 rows × 8 keys per
    // lane reached the GEMM ceiling; on GPUs 64 keys per block keep the shuffles few).
    c.keys_per_lane = std::max<std::uint32_t>(1, 64 / c.subgroup);
    c.subgroups = std::max<std::uint32_t>(1, 64 / c.subgroup);
    while (c.subgroups * c.subgroup > caps.max_workgroup_invocations && c.subgroups > 1) c.subgroups /= 2;
    // Registers: R rows × dv4 vec4 accumulators + R × KL scores per lane. At most 4 vec4 slots per
    // pass: 16 slots (Dv = 512 at 8 lanes) made LLVM spend minutes compiling the unrolled P·V; wider
    // heads take several column passes, each recomputing the scores (Dv ≤ 128 at 8 lanes: one).
    const auto slots = static_cast<std::uint32_t>((p.Dv + 4 * c.subgroup - 1) / (4 * c.subgroup));
    c.dv4 = std::min<std::uint32_t>(slots, 4);
    // K/V staging. CPU devices stream: their shared memory is ordinary memory reached through scalar
    // loops and every barrier is a coroutine switch (docs/LAVAPIPE.md), so each subgroup reading its
    // own K/V from the cache wins. GPUs stage each key block once for the workgroup, as every GPU
    // flash-attention kernel does, with 128 invocations so that one load serves several subgroups.
    // That choice and its sizes are unmeasured on a real GPU (docs/PERFORMANCE.md).
    const FusedConfig streamed = c;
    c.staged = overrides.shared_tiles.value_or(!is_cpu(caps));
    if (c.staged) {
        if (!is_cpu(caps))  // forced or chosen alike, so a forced run measures what the tuning picks
            while (c.subgroups * c.subgroup < 128 && 2 * c.subgroups * c.subgroup <= caps.max_workgroup_invocations)
                c.subgroups *= 2;
        // K chunks of at most 8 vec4s, balanced (Dk = 36: 5 + 4, not 8 + 1).
        const auto dk4 = static_cast<std::uint32_t>(std::max<std::int64_t>(1, (p.Dk + 3) / 4));
        c.kd4 = (dk4 + (dk4 + 7) / 8 - 1) / ((dk4 + 7) / 8);
        const auto dv4_needed = static_cast<std::uint32_t>((p.Dv + 3) / 4);
        // Fit the tiles: fewer dims per K chunk first (more barriers), then smaller key blocks, then
        // fewer output columns per pass (more passes, each recomputing the scores).
        for (;;) {
            c.v_width4 = std::min(c.subgroup * c.dv4, dv4_needed);
            if (c.shared_bytes() <= caps.max_shared_bytes) break;
            if (c.kd4 > 4) c.kd4 /= 2;
            else if (c.keys_per_lane > 1) c.keys_per_lane /= 2;
            else if (c.dv4 > 1) c.dv4 /= 2;
            else if (c.kd4 > 1) c.kd4 /= 2;
            else break;
        }
        if (c.shared_bytes() > caps.max_shared_bytes) c = streamed;  // a device with almost none
    }
    c.column_passes = (slots + c.dv4 - 1) / c.dv4;
    c.rows = std::clamp<std::uint32_t>(32 / c.dv4, 1, 8);
    // A unit has group·Nq rows (decode: one per query head of the group). Where that is fewer than
    // R, the spare rows would compute copies of the last one: their Q fetches, FMAs and shuffles
    // wasted (GQA decode with group 4 ran 1.2-1.8x slower at R = 8 than at 4, docs/PERFORMANCE.md).
    // Powers of two only, so that decode shapes share few pipelines.
    c.rows = fitted_rows(p.group * p.Nq, c.rows);
    // Texel views: float ones when Q, K and V all have them; else 32-bit word views that the shader
    // decodes as it would storage-buffer words. On lavapipe a texel fetch costs a sixth of a storage
    // buffer load (docs/PERFORMANCE.md, "Storage types in decode"), so every type gains from them.
    // Either kind needs every row to start on 4 elements (one float texel; one word of fp8, half a
    // texel of bf16: common/typed_load.glsl's TL_ALIGNED).
    const bool aligned = texel_aligned(q_strides, p.Dk) && texel_aligned(k_strides, p.Dk) && texel_aligned(v_strides, p.Dv);
    std::tie(c.texel, c.texel_words) = flash_loads(caps, p, aligned, overrides);
    // GPUs decode with flash_decode.comp where a unit's rows fit one workgroup (a step's query heads
    // of one K/V head) and run everything else through flash_coopmat.comp on the matrix units where
    // the storage is f16 (coopmat_by_default: measured on an H200), else flash_tile.comp
    // (FlashAttention-2's partition); CPU devices keep flash.comp's streamed layout, which
    // LAVAPIPE.md measured. A caller who forces flash.comp's staging or texel loads gets flash.comp.
    const FusedKernel chosen = is_cpu(caps) || register_knobs_forced(overrides) ? FusedKernel::flash
                               : p.group * p.Nq <= 8                                ? FusedKernel::decode
                               : coopmat_by_default(caps, p)                        ? FusedKernel::coopmat
                                                                                    : FusedKernel::tile;
    FusedKernel kernel = overrides.fused_kernel.value_or(chosen);
    if (kernel == FusedKernel::decode) {
        std::string why_not;
        auto decode = decode_config(c, caps, p, overrides, &why_not);
        if (decode) return decode;
        if (overrides.fused_kernel == FusedKernel::decode) return refuse(why_not);
    }
    if (kernel == FusedKernel::coopmat) {
        try {
            return coopmat_config(c, caps, p, overrides, kv_tensor_loads(p, k_strides, v_strides));
        } catch (const InvalidArgument&) {
            if (overrides.fused_kernel == FusedKernel::coopmat) throw;
            kernel = FusedKernel::tile;  // chosen, not forced: a head too wide for its tile takes the tile kernel
        }
    }
    if (kernel == FusedKernel::tile) {
        std::string why_not;
        auto tile = tile_config(c, caps, p, overrides, &why_not);
        if (tile) return tile;
        if (overrides.fused_kernel == FusedKernel::tile) return refuse(why_not);
    }
    return c;
}

std::string BackwardConfig::describe() const {
    if (coopmat)
        return "backward-coopmat[words sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") + "x" +
               std::to_string(subgroups) + " " + coopmat->describe() +
               (column_passes > 1 ? " passes=" + std::to_string(column_passes) : "") + "]";
    return std::string("backward[") + (texel_words ? "texel-words" : texel ? "texel" : "words") + " sg" + std::to_string(subgroup) + (require_subgroup ? "!" : "") + "x" + std::to_string(subgroups) +
           " dq rows" + std::to_string(q_rows) + " keys" + std::to_string(subgroup * q_keys_per_lane) + " dkv keys" +
           std::to_string(kv_keys) + " rows" + std::to_string(subgroup * kv_rows_per_lane) + " slots" +
           std::to_string(slots) + (column_passes > 1 ? " passes=" + std::to_string(column_passes) : "") + "]";
}

std::optional<BackwardConfig> choose_backward(const vk::DeviceCaps& caps, const Problem& p,
                                              const std::array<std::int64_t, 4>& q_strides,
                                              const std::array<std::int64_t, 4>& k_strides,
                                              const std::array<std::int64_t, 4>& v_strides,
                                              const std::array<std::int64_t, 4>& grad_out_strides,
                                              const VariantOverrides& overrides, std::string* why) {
    refuse_gemm_shape(overrides);
    refuse_workgroup_without_coopmat(overrides.workgroup_matrices, overrides.fused_kernel == FusedKernel::coopmat, "fused_kernel");
    std::string reason;
    const auto subgroup = kernel_subgroup(caps, reason);
    if (!subgroup) {
        if (why) *why = reason;
        return std::nullopt;
    }
    BackwardConfig c;
    std::tie(c.subgroup, c.require_subgroup) = *subgroup;
    // 64 invocations and 64-key (query) blocks, as the forward (docs/LAVAPIPE.md).
    c.subgroups = std::max<std::uint32_t>(1, 64 / c.subgroup);
    while (c.subgroups * c.subgroup > caps.max_workgroup_invocations && c.subgroups > 1) c.subgroups /= 2;
    c.q_keys_per_lane = c.kv_rows_per_lane = std::max<std::uint32_t>(1, 64 / c.subgroup);
    // 8 rows (keys) per subgroup and up to 4 slots, as the forward: each loaded vec4 feeds 8·8·4 FMAs.
    // Measured on lavapipe (B 1, H 8, N 1024, docs/PERFORMANCE.md): 8/8 rows over 4/4 gave 1.23x at
    // D 64 and 1.15x at D 128, although the dK/dV kernel then holds 2·8·4 accumulator vec4s; half the
    // slots (two column passes, each recomputing the scores) ran 1.8x slower at D 128. Wider heads
    // take column passes.
    const std::int64_t widest = std::max(p.Dk, p.Dv);
    const auto slots_needed = static_cast<std::uint32_t>((widest + 4 * c.subgroup - 1) / (4 * c.subgroup));
    c.slots = std::clamp<std::uint32_t>(slots_needed, 1, 4);
    c.column_passes = (slots_needed + c.slots - 1) / c.slots;
    // Rows and keys fitted to what a unit has (GQA decode-like shapes, short key sequences).
    c.q_rows = fitted_rows(p.group * p.Nq, 8);
    c.kv_keys = fitted_rows(p.Nkv, 8);
    // Loads as the forward's; dO is read like q, so its rows must start on 4 elements too.
    const bool aligned = texel_aligned(q_strides, p.Dk) && texel_aligned(k_strides, p.Dk) &&
                         texel_aligned(v_strides, p.Dv) && texel_aligned(grad_out_strides, p.Dv);
    std::tie(c.texel, c.texel_words) = flash_loads(caps, p, aligned, overrides);
    // The cooperative-matrix kernels where forced, or chosen as the forward's are (coopmat_by_default:
    // the matrix units, f16 storage, maximal reconvergence) unless a knob of the register kernels is
    // forced. On an H200 they ran 2.3-2.4× the register kernels (session 21) and matched the
    // reference through the units at every case of the [backward][coopmat] tests (session 26).
    // Chosen, not forced, a shape they refuse (heads past 128 on the units) keeps the register kernels.
    const bool coopmat_forced = overrides.fused_kernel == FusedKernel::coopmat;
    if (coopmat_forced || (!overrides.fused_kernel && !register_knobs_forced(overrides) && coopmat_by_default(caps, p))) {
        std::uint32_t subgroups = 4, lanes = c.subgroup;  // the subgroup of units in parts, kept with the layout
        bool require = c.require_subgroup;
        const bool workgroup = overrides.workgroup_matrices.value_or(false);
        matrix_parts_subgroup(caps, {p.dtype, p.k_dtype, p.v_dtype}, workgroup, lanes, require);
        std::optional<CoopmatBackwardLayout> layout;
        try {
            layout = choose_coopmat_backward(caps, lanes, subgroups, p, workgroup);
        } catch (const InvalidArgument&) {
            if (coopmat_forced) throw;
        }
        if (layout) {
            c.subgroup = lanes;
            c.require_subgroup = require;
            c.coopmat = layout;
            c.subgroups = subgroups;
            c.q_rows = c.kv_keys = 16;
            c.texel = c.texel_words = false;
            c.column_passes = static_cast<std::uint32_t>((std::max(p.Dk, p.Dv) + c.coopmat->columns() - 1) / c.coopmat->columns());
        }
    }
    return c;
}

std::uint32_t choose_splits(const vk::DeviceCaps& caps, const Problem& p, const FusedConfig& c, unsigned host_threads) {
    // Fill the device: ≥ 8 workgroups per CPU thread on CPU devices (lavapipe runs one workgroup per
    // thread at a time; more even out the ends). On GPUs a decode is bound by bytes in flight: ≥ 8
    // workgroups per compute unit where an extension gives their count (on an H200's 132 SMs, 1,056
    // workgroups of 128 invocations fill half of every SM's 2,048 threads at once; 31 splits × 8 K/V
    // heads, 248 workgroups, used an eighth of them and streamed 1,088 keys each serially), else
    // ≥ 256. Issue #31's cost model; its GPU figures decide the factor.
    constexpr std::int64_t kWorkgroupsPerComputeUnit = 8;
    const std::int64_t gpu_target = std::max<std::int64_t>(256, kWorkgroupsPerComputeUnit * caps.compute_units);
    const std::int64_t target = caps.kind == vk::DeviceKind::cpu ? 8 * std::max(1u, host_threads) : gpu_target;
    const std::int64_t rows = p.group * p.Nq;
    const std::int64_t blocks = p.B * p.Hkv * ((rows + c.rows_per_workgroup() - 1) / c.rows_per_workgroup());
    const std::int64_t key_blocks = (p.Nkv + c.key_block() - 1) / c.key_block();
    // At least 256 keys (4 blocks of 64) per split, so the combine step stays small next to the
    // work, whatever the block size.
    const std::int64_t blocks_per_split = (256 + c.key_block() - 1) / c.key_block();
    const std::int64_t most = std::max<std::int64_t>(1, key_blocks / blocks_per_split);
    const std::int64_t splits = std::clamp<std::int64_t>((target + blocks - 1) / blocks, 1, std::min<std::int64_t>(most, 1024));
    // Each split gets ceil(key_blocks / splits) whole key blocks (fused.cpp), so the last ones can be
    // left with none (101 blocks in 25 splits of 5: 21 used): return only the splits that get keys.
    const std::int64_t per_split = (key_blocks + splits - 1) / splits;
    return static_cast<std::uint32_t>((key_blocks + per_split - 1) / per_split);
}

std::int64_t fused_keys_per_dispatch(const vk::DeviceCaps& caps, const FusedConfig& c, const Problem& p) {
    if (caps.max_loop_iterations == 0) return 0;
    if (c.coopmat)  // flash_coopmat.comp: its tiles
        return std::max<std::int64_t>(1, loop_budget(caps) / coopmat_loops_per_tile(*c.coopmat, c.subgroup, c.subgroups, p) - 1) *
               c.key_block();
    if (c.tile)  // flash_tile.comp: its tiles
        return std::max<std::int64_t>(1, loop_budget(caps) / tile_loops_per_tile(*c.tile, c.subgroup, c.subgroups, p) - 1) *
               c.key_block();
    if (c.decode)  // flash_decode.comp: its steps, and the end's merge (a few hundred at most)
        return std::max<std::int64_t>(1, std::max<std::int64_t>(0, loop_budget(caps) - 1000) / decode_loops_per_step(*c.decode, c.rows, p) - 1) *
               c.key_block();
    const std::int64_t Dk4 = (p.Dk + 3) / 4;
    std::int64_t per_block = 1 + Dk4 + c.subgroup;
    if (c.staged) {  // plus the loops that load the tiles, one trip per workgroup-wide pass
        const std::int64_t lanes = c.subgroups * c.subgroup, chunks = (Dk4 + c.kd4 - 1) / c.kd4;
        per_block += chunks * (1 + (c.key_block() * c.kd4 + lanes - 1) / lanes) +
                     (c.key_block() * c.v_width4 + lanes - 1) / lanes;
    }
    return std::max<std::int64_t>(1, loop_budget(caps) / per_block - 1) * c.key_block();
}

namespace {
// Blocks (of keys in flash_bwd_q.comp, of queries in flash_bwd_kv.comp) one workgroup may visit
// `times` over: both iterate 1 + ceil(Dk/4) + ceil(Dv/4) + SG times per block.
std::int64_t backward_blocks(const vk::DeviceCaps& caps, const BackwardConfig& c, const Problem& p, std::int64_t times) {
    const std::int64_t per_block = 1 + (p.Dk + 3) / 4 + (p.Dv + 3) / 4 + c.subgroup;
    return std::max<std::int64_t>(1, loop_budget(caps) / per_block / times - 1);
}
}  // namespace

std::int64_t backward_keys_limit(const vk::DeviceCaps& caps, const BackwardConfig& c, const Problem& p) {
    if (caps.max_loop_iterations == 0) return 0;
    if (c.coopmat)  // the dQ kernel's key tiles
        return std::max<std::int64_t>(1, loop_budget(caps) / coopmat_backward_loops_per_key_tile(*c.coopmat, c.subgroup, c.subgroups) - 1) *
               c.coopmat->tile;
    return backward_blocks(caps, c, p, 1) * c.subgroup * c.q_keys_per_lane;
}

std::int64_t backward_queries_limit(const vk::DeviceCaps& caps, const BackwardConfig& c, const Problem& p) {
    if (caps.max_loop_iterations == 0) return 0;
    // The dK/dV kernel visits the query blocks once for every query head of the group.
    if (c.coopmat)
        return std::max<std::int64_t>(1, loop_budget(caps) / coopmat_backward_loops_per_query_tile(*c.coopmat, c.subgroup, c.subgroups) /
                                             std::max<std::int64_t>(1, p.group) - 1) *
               c.coopmat->tile;
    return backward_blocks(caps, c, p, std::max<std::int64_t>(1, p.group)) * c.subgroup * c.kv_rows_per_lane;
}

std::string backward_fused_misfit(const vk::DeviceCaps& caps, const BackwardConfig& c, const Problem& p) {
    const std::int64_t q_groups = (p.group * p.Nq + c.subgroups * c.q_rows - 1) / (c.subgroups * c.q_rows);
    const std::int64_t kv_groups = (p.Nkv + c.subgroups * c.kv_keys - 1) / (c.subgroups * c.kv_keys);
    if (std::max(q_groups, kv_groups) > caps.max_workgroup_count[0])
        return "q: the fused backward's grid of " + std::to_string(std::max(q_groups, kv_groups)) +
               " row blocks passes the device's " + std::to_string(caps.max_workgroup_count[0]) + ".";
    const std::string budget = " that one workgroup of the fused backward may visit on this device (its shader loops "
                               "stop after " + std::to_string(caps.max_loop_iterations) +
                               " iterations; the unfused backward takes more).";
    if (const std::int64_t most = backward_keys_limit(caps, c, p); most > 0 && p.Nkv > most)
        return "k: " + std::to_string(p.Nkv) + " keys pass the " + std::to_string(most) + budget;
    if (const std::int64_t most = backward_queries_limit(caps, c, p); most > 0 && p.Nq > most)
        return "q: " + std::to_string(p.Nq) + " queries pass the " + std::to_string(most) + budget;
    return {};
}

std::int64_t backward_mask_terms_per_dispatch(const vk::DeviceCaps& caps, const Problem& p) {
    if (caps.max_loop_iterations == 0) return 0;
    // One term iterates once, plus ceil(Dk/4) and ceil(Dv/4) times for its two dot products.
    return std::max<std::int64_t>(1, loop_budget(caps) / (1 + (p.Dk + 3) / 4 + (p.Dv + 3) / 4) - 1);
}

}  // namespace vkattn::detail

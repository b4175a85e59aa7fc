#include "attention/tuning.hpp"

#include <algorithm>
#include <bit>
#include <optional>
#include <tuple>
#include <utility>

#include "tensor/storage_rules.hpp"

namespace vkattn::detail {
namespace {

bool is_cpu(const vk::DeviceCaps& caps) { return caps.kind == vk::DeviceKind::cpu; }

// The float texel views (RGBA32F, RGBA16F) of f32 and f16; every other type is read as words and
// decoded, from a storage buffer or (the fused kernels) through R32_UINT views.
bool texel_supported(const vk::DeviceCaps& caps, DType dtype) {
    if (dtype == DType::f32) return caps.texel_rgba32f;
    if (dtype == DType::f16) return caps.texel_rgba16f;
    return false;
}

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

BmmConfig base_bmm(const vk::DeviceCaps& caps, bool texel, const VariantOverrides& overrides) {
    // shared_tiles and a forced texel_loads are bmm.comp's knobs: setting one asks for it.
    const bool blocks_asked = overrides.shared_tiles.has_value() || overrides.texel_loads == true;
    const GemmKernel chosen = is_cpu(caps) || blocks_asked ? GemmKernel::blocks : GemmKernel::tile;
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
    if (tile) return 2ull * 4 * ks4 * (block_rows() / 4 + 1 + block_cols() / 4 + 1) * 16;
    return shared_tiles ? std::uint64_t{block_rows() + block_cols()} * ks4 * 16 : 0;
}

std::string BmmConfig::describe() const {
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

std::string FusedConfig::describe() const {
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
// The subgroup size the fused layouts are built for: 8..32 lanes where the device can be told
// (8 on CPU devices), otherwise the size it reports (the shaders check it at run time). Empty with
// the reason when the device lacks what they need.
std::optional<std::pair<std::uint32_t, bool>> flash_subgroup(const vk::DeviceCaps& caps, std::string& why) {
    if (!caps.subgroup_arithmetic || !caps.subgroup_shuffle) {
        why = "the device lacks subgroup arithmetic or shuffle operations in compute shaders";
        return std::nullopt;
    }
    std::uint32_t size = caps.subgroup_size;
    bool require = false;
    if (caps.subgroup_size_control) {
        size = std::clamp<std::uint32_t>(32, caps.min_subgroup_size, caps.max_subgroup_size);
        if (caps.kind == vk::DeviceKind::cpu) size = std::clamp<std::uint32_t>(8, caps.min_subgroup_size, caps.max_subgroup_size);
        require = true;
    }
    if (size == 0 || size > 128 || (size & (size - 1)) != 0) {
        why = "the subgroup size " + std::to_string(size) + " is not a power of two up to 128";
        return std::nullopt;
    }
    return std::pair{size, require};
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
    std::string reason;
    const auto subgroup = flash_subgroup(caps, reason);
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
    // of one K/V head) and run everything else through flash_tile.comp (FlashAttention-2's
    // partition); CPU devices keep flash.comp's streamed layout, which LAVAPIPE.md measured. A caller
    // who forces flash.comp's staging or texel loads gets flash.comp. The GPU choices follow the cost
    // model (docs/design/GPU_KERNELS.md), unmeasured.
    const bool flash_forced = overrides.shared_tiles.has_value() || overrides.texel_loads == true;
    const FusedKernel chosen = is_cpu(caps) || flash_forced ? FusedKernel::flash
                               : p.group * p.Nq <= 8        ? FusedKernel::decode
                                                            : FusedKernel::tile;
    const FusedKernel kernel = overrides.fused_kernel.value_or(chosen);
    if (kernel == FusedKernel::decode) {
        std::string why_not;
        auto decode = decode_config(c, caps, p, overrides, &why_not);
        if (decode) return decode;
        if (overrides.fused_kernel == FusedKernel::decode) return refuse(why_not);
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
    std::string reason;
    const auto subgroup = flash_subgroup(caps, reason);
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

namespace {
// A tenth of the budget is left for the loops outside the key loop and for rounding.
std::int64_t loop_budget(const vk::DeviceCaps& caps) { return caps.max_loop_iterations / 10 * 9; }
}  // namespace

std::int64_t fused_keys_per_dispatch(const vk::DeviceCaps& caps, const FusedConfig& c, const Problem& p) {
    if (caps.max_loop_iterations == 0) return 0;
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
    return backward_blocks(caps, c, p, 1) * c.subgroup * c.q_keys_per_lane;
}

std::int64_t backward_queries_limit(const vk::DeviceCaps& caps, const BackwardConfig& c, const Problem& p) {
    if (caps.max_loop_iterations == 0) return 0;
    // The dK/dV kernel visits the query blocks once for every query head of the group.
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

std::int64_t backward_mask_terms_per_dispatch(const vk::DeviceCaps& caps, const Problem& p) {
    if (caps.max_loop_iterations == 0) return 0;
    // One term iterates once, plus ceil(Dk/4) and ceil(Dv/4) times for its two dot products.
    return std::max<std::int64_t>(1, loop_budget(caps) / (1 + (p.Dk + 3) / 4 + (p.Dv + 3) / 4) - 1);
}

std::int64_t unfused_keys_per_dispatch(const vk::DeviceCaps& caps, const UnfusedConfig& c) {
    if (caps.max_loop_iterations == 0) return 0;
    const std::int64_t by_pv = 4 * loop_budget(caps);
    const std::int64_t by_softmax = loop_budget(caps) / 2 * c.softmax.workgroup;
    return std::min(by_pv, by_softmax) / 64 * 64;
}

BmmConfig choose_gemm(const vk::DeviceCaps& caps, std::int64_t m, std::int64_t n, std::int64_t k,
                      const VariantOverrides& overrides) {
    (void)m;
    const bool texel = overrides.texel_loads.value_or(true) && caps.texel_rgba32f && n % 4 == 0 && k % 4 == 0;
    return base_bmm(caps, texel, overrides);
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

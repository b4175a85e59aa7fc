#include "vkattn/variants.hpp"

namespace vkattn {

const std::vector<KernelVariant>& kernel_variants() {
    static const std::vector<KernelVariant> all{
        {"unfused-registers", Impl::unfused, {.shared_tiles = false},
         "three stages; bmm.comp's register blocks fed straight from texel or word loads"},
        {"unfused-shared", Impl::unfused, {.shared_tiles = true}, "three stages; bmm.comp's K-slices staged in shared memory"},
        {"unfused-words", Impl::unfused, {.texel_loads = false, .gemm_kernel = GemmKernel::blocks},
         "three stages; bmm.comp's storage-buffer word loads"},
        {"unfused-tile", Impl::unfused, {.gemm_kernel = GemmKernel::tile},
         "three stages; bmm_tile.comp's 128x128 tiles and 8x8 micro-tiles (the GPUs' products)"},
        {"unfused-shared-tree", Impl::unfused, {.subgroup_ops = false}, "three stages; the softmax's shared-memory reductions"},
        {"flash-streamed", Impl::fused, {.shared_tiles = false, .fused_kernel = FusedKernel::flash},
         "flash.comp, K/V streamed by each subgroup (the CPU devices' layout)"},
        {"flash-staged", Impl::fused, {.shared_tiles = true, .fused_kernel = FusedKernel::flash},
         "flash.comp, K/V blocks staged once per workgroup in shared memory"},
        {"flash-words", Impl::fused, {.texel_loads = false, .shared_tiles = false, .fused_kernel = FusedKernel::flash},
         "flash.comp streamed, storage-buffer word loads"},
        {"tile", Impl::fused, {.fused_kernel = FusedKernel::tile},
         "flash_tile.comp: FlashAttention-2's tiles and register micro-tiles (the GPUs' prefill), 64 rows x 64 keys"},
        // The tile's other shapes (FlashAttention-2's Br 32-128, Bc 32-64), for the tuner: fewer
        // rows fill more SMs at short prompts; more rows read each K/V tile for more of them.
        {"tile-32x64", Impl::fused, {.fused_kernel = FusedKernel::tile, .tile_rows = 32, .tile_keys = 64},
         "flash_tile.comp with 32-row, 64-key tiles"},
        {"tile-64x32", Impl::fused, {.fused_kernel = FusedKernel::tile, .tile_rows = 64, .tile_keys = 32},
         "flash_tile.comp with 64-row, 32-key tiles"},
        {"tile-128x32", Impl::fused, {.fused_kernel = FusedKernel::tile, .tile_rows = 128, .tile_keys = 32},
         "flash_tile.comp with 128-row, 32-key tiles (twice the rows per K/V tile read)"},
        {"split-flash-streamed", Impl::split, {.shared_tiles = false, .fused_kernel = FusedKernel::flash},
         "split-KV over flash.comp streamed, merged by combine.comp"},
        {"split-flash-staged", Impl::split, {.shared_tiles = true, .fused_kernel = FusedKernel::flash},
         "split-KV over flash.comp staged"},
        {"split-decode", Impl::split, {.fused_kernel = FusedKernel::decode},
         "flash_decode.comp: split-KV, several lanes per key, K/V read once per group (the GPUs' decode)"},
        // Its lanes per key around the heuristics' 8 at D = 128: 4 holds twice the keys in flight
        // per subgroup, 16 halves each lane's registers.
        {"split-decode-lpk4", Impl::split, {.fused_kernel = FusedKernel::decode, .decode_lanes_per_key = 4},
         "flash_decode.comp with 4 lanes per key"},
        {"split-decode-lpk16", Impl::split, {.fused_kernel = FusedKernel::decode, .decode_lanes_per_key = 16},
         "flash_decode.comp with 16 lanes per key (subgroups of 16 lanes or more)"},
        {"split-tile", Impl::split, {.fused_kernel = FusedKernel::tile}, "split-KV over flash_tile.comp"},
        // Issue #33: 16-bit products, so the tuner times them for f16 and bf16 storage only (rounds_operands).
        {"coopmat", Impl::fused, {.fused_kernel = FusedKernel::coopmat},
         "flash_coopmat.comp: FlashAttention-2's tiles on 16x16x16 cooperative matrices, f16 or bf16 operands (the matrix units, or their portable implementation)"},
        // Its other shapes (the default is 64 rows x 64 keys where shared memory allows): 2
        // subgroups per workgroup fill more SMs and let more workgroups share one; 32-key tiles
        // halve the scores' tile and the softmax's registers.
        {"coopmat-32x64", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 32, .tile_keys = 64},
         "flash_coopmat.comp with 32-row, 64-key tiles"},
        {"coopmat-64x32", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 64, .tile_keys = 32},
         "flash_coopmat.comp with 64-row, 32-key tiles"},
        // 8 subgroups: each K/V tile staged and waited on once for 128 rows (half the staging and
        // barriers per row of 64), at the same warps per SM where registers set them (2 × 4 → 1 × 8).
        // Shared memory takes it up to D 128 on the units (37,416 bytes; K's tile no longer holds Q's 128
        // rows); lavapipe refuses it.
        {"coopmat-128x32", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 128, .tile_keys = 32},
         "flash_coopmat.comp with 128-row, 32-key tiles (8 subgroups)"},
        // 12 and 16 subgroups: a compiler must fit a whole workgroup's registers in one multiprocessor,
        // so its invocations bound each one's (NVIDIA: 65,536 per SM, so at most 168 at 384 invocations
        // and 128 at 512), where 4 subgroups at ~200 registers (the kernel's count on NVIDIA's driver,
        // sessions 22-25) leave 8 warps per SM: these run 12 and 16 there, to hide the latency that
        // binds the kernel (docs/design/GPU_KERNELS.md, "Where D 64's time goes"). Shared memory takes
        // 16-key tiles up to D 128 on the units, 32-key tiles with 192 rows up to D 80.
        {"coopmat-192x16", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 192, .tile_keys = 16},
         "flash_coopmat.comp with 192-row, 16-key tiles (12 subgroups)"},
        {"coopmat-192x16-kv-apart", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 192, .tile_keys = 16, .kv_apart = true},
         "flash_coopmat.comp with 192-row, 16-key tiles (12 subgroups), K and V apart"},
        {"coopmat-192x32", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 192, .tile_keys = 32},
         "flash_coopmat.comp with 192-row, 32-key tiles (12 subgroups)"},
        {"coopmat-256x16", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 256, .tile_keys = 16},
         "flash_coopmat.comp with 256-row, 16-key tiles (16 subgroups)"},
        {"coopmat-256x16-kv-apart", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 256, .tile_keys = 16, .kv_apart = true},
         "flash_coopmat.comp with 256-row, 16-key tiles (16 subgroups), K and V apart"},
        // O's two forms (CoopmatLayout::named_by_default chooses): the array, which NVIDIA's
        // compiler kept in local memory, and named matrices (refused on the units past 112-wide heads).
        {"coopmat-array", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .named_accumulators = false},
         "flash_coopmat.comp with O as an array of accumulators"},
        {"coopmat-named", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .named_accumulators = true},
         "flash_coopmat.comp with O as named accumulators"},
        // Two 16-row tiles per subgroup (2 subgroups, 64 rows): each K and V operand feeds two
        // products and every warp has twice the independent products between barriers; Q read from
        // a tile of its own. Heads past 64 columns take column passes (8 accumulators at most).
        {"coopmat-rt2", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .row_tiles = 2},
         "flash_coopmat.comp with two 16-row tiles per subgroup, Q read from shared memory"},
        // Q's operands from shared memory with one row tile (session 26's qshared probe): 4·dk_tiles
        // registers fewer; D 128 then takes 32-key tiles.
        {"coopmat-qshared", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .q_in_shared = true},
         "flash_coopmat.comp with Q read from shared memory at every product"},
        // K and V in tiles of their own, staged together a tile ahead: 2 barriers per key tile
        // rather than 4; alone and with two row tiles (then 32-key tiles at D 64 on the units).
        {"coopmat-kv-apart", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .kv_apart = true},
         "flash_coopmat.comp with K and V in shared tiles of their own (2 barriers per key tile)"},
        {"coopmat-rt2-kv-apart", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .row_tiles = 2, .kv_apart = true},
         "flash_coopmat.comp with two row tiles per subgroup and K and V apart"},
        {"split-coopmat", Impl::split, {.fused_kernel = FusedKernel::coopmat}, "split-KV over flash_coopmat.comp"},
        // VK_NV_cooperative_matrix2's workgroup-scope matrices (DeviceInfo::workgroup_matrices; their
        // portable twin elsewhere): the driver lays out S, P and O and stages K/V, as llama.cpp's
        // coopmat2 shader lets it. 64 rows on 4 subgroups, and 128 on 8.
        {"coopmat-wg", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .workgroup_matrices = true},
         "flash_cm2.comp: the forward on workgroup-scope matrices (VK_NV_cooperative_matrix2); f16 K/V by tensor loads, other K/V staged"},
        {"coopmat-wg-64x32", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 64, .tile_keys = 32, .workgroup_matrices = true},
         "flash_cm2.comp with 64-row, 32-key tiles"},
        {"coopmat-wg-128x64", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 128, .tile_keys = 64, .workgroup_matrices = true},
         "flash_cm2.comp with 128-row, 64-key tiles (8 subgroups)"},
        {"split-coopmat-wg", Impl::split, {.fused_kernel = FusedKernel::coopmat, .workgroup_matrices = true},
         "split-KV over flash_cm2.comp"},
    };
    return all;
}

const std::vector<KernelVariant>& backward_variants() {
    // choose_backward reads fused_kernel as coopmat (the cooperative-matrix kernels) or anything
    // else forced (the register kernels, flash_bwd_q.comp and flash_bwd_kv.comp).
    static const std::vector<KernelVariant> all{
        {"backward-fused", Impl::fused, {.fused_kernel = FusedKernel::flash},
         "flash_bwd_q.comp and flash_bwd_kv.comp: dQ, and dK with dV, in registers (FP32 units)"},
        {"backward-coopmat", Impl::fused, {.fused_kernel = FusedKernel::coopmat},
         "flash_bwd_q_coopmat.comp and flash_bwd_kv_coopmat.comp: the five products on 16x16x16 cooperative matrices, f16 or bf16 operands"},
        {"backward-coopmat-wg", Impl::fused, {.fused_kernel = FusedKernel::coopmat, .workgroup_matrices = true},
         "bwd_cm2_q.comp and bwd_cm2_kv.comp: the five products on workgroup-scope matrices (VK_NV_cooperative_matrix2), f16 storage"},
        {"backward-unfused", Impl::unfused, {.gemm_kernel = GemmKernel::blocks},
         "three stages, bmm.comp's register blocks (the CPU devices' products)"},
        {"backward-unfused-tile", Impl::unfused, {.gemm_kernel = GemmKernel::tile},
         "three stages, bmm_tile.comp's 128x128 tiles (the GPUs' products)"},
    };
    return all;
}

const std::vector<GemmShape>& gemm_shapes() {
    // docs/design/GPU_KERNELS.md, "The GEMM's shapes", has each one's count: the default, then
    // the typed loaders, one buffer, 8 subgroups two ways, 64-deep slices in one buffer, 64-column
    // tiles, 16-deep slices, and the portable default's 64 × 64 tiles.
    static const std::vector<GemmShape> all{
        GemmShape{},                         GemmShape{2, 2, 4, 4, 32, 2, false}, GemmShape{2, 2, 4, 4, 32, 1, true},
        GemmShape{2, 4, 4, 2, 32, 2, true},  GemmShape{4, 2, 2, 4, 32, 2, true},  GemmShape{2, 2, 4, 4, 64, 1, true},
        GemmShape{2, 2, 4, 2, 32, 2, true},  GemmShape{2, 2, 4, 4, 16, 2, true},  GemmShape{2, 2, 2, 2, 16, 2, true},
    };
    return all;
}

namespace {
// A catalogue's variant of that name, or nullptr; its names, comma-separated.
const KernelVariant* find_in(const std::vector<KernelVariant>& catalogue, std::string_view name) {
    for (const KernelVariant& v : catalogue)
        if (v.name == name) return &v;
    return nullptr;
}
std::string names_of(const std::vector<KernelVariant>& catalogue) {
    std::string names;
    for (const KernelVariant& v : catalogue) names += (names.empty() ? "" : ", ") + v.name;
    return names;
}
}  // namespace

const KernelVariant* find_backward_variant(std::string_view name) { return find_in(backward_variants(), name); }

std::string backward_variant_names() { return names_of(backward_variants()); }

const KernelVariant* find_kernel_variant(std::string_view name) { return find_in(kernel_variants(), name); }

bool rounds_operands(const VariantOverrides& overrides) { return overrides.fused_kernel == FusedKernel::coopmat; }

std::string kernel_variant_names() { return names_of(kernel_variants()); }

}  // namespace vkattn

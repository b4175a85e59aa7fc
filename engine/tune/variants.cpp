#include "vkattn/variants.hpp"

namespace vkattn {

const std::vector<KernelVariant>& kernel_variants() {
    static const std::vector<KernelVariant> all{
        {"unfused-registers", Impl::unfused, {.shared_tiles = false},
         "three stages; bmm.comp's register blocks fed straight from texel or word loads"},
        {"unfused-shared", Impl::unfused, {.shared_tiles = true}, "three stages; bmm.comp's K-slices staged in shared memory"},
        {"unfused-words", Impl::unfused, {.texel_loads = false}, "three stages; storage-buffer word loads"},
        {"unfused-shared-tree", Impl::unfused, {.subgroup_ops = false}, "three stages; the softmax's shared-memory reductions"},
        {"flash-streamed", Impl::fused, {.shared_tiles = false, .fused_kernel = FusedKernel::flash},
         "flash.comp, K/V streamed by each subgroup (the CPU devices' layout)"},
        {"flash-staged", Impl::fused, {.shared_tiles = true, .fused_kernel = FusedKernel::flash},
         "flash.comp, K/V blocks staged once per workgroup in shared memory"},
        {"flash-words", Impl::fused, {.texel_loads = false, .shared_tiles = false, .fused_kernel = FusedKernel::flash},
         "flash.comp streamed, storage-buffer word loads"},
        {"tile", Impl::fused, {.fused_kernel = FusedKernel::tile},
         "flash_tile.comp: FlashAttention-2's tiles and register micro-tiles (the GPUs' prefill)"},
        {"split-flash-streamed", Impl::split, {.shared_tiles = false, .fused_kernel = FusedKernel::flash},
         "split-KV over flash.comp streamed, merged by combine.comp"},
        {"split-flash-staged", Impl::split, {.shared_tiles = true, .fused_kernel = FusedKernel::flash},
         "split-KV over flash.comp staged"},
        {"split-decode", Impl::split, {.fused_kernel = FusedKernel::decode},
         "flash_decode.comp: split-KV, several lanes per key, K/V read once per group (the GPUs' decode)"},
        {"split-tile", Impl::split, {.fused_kernel = FusedKernel::tile}, "split-KV over flash_tile.comp"},
    };
    return all;
}

const KernelVariant* find_kernel_variant(std::string_view name) {
    for (const KernelVariant& v : kernel_variants())
        if (v.name == name) return &v;
    return nullptr;
}

std::string kernel_variant_names() {
    std::string names;
    for (const KernelVariant& v : kernel_variants()) names += (names.empty() ? "" : ", ") + v.name;
    return names;
}

}  // namespace vkattn

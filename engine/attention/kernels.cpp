#include "attention/kernels.hpp"

#include <algorithm>

#include "runtime.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// bmm.comp's constant_ids.
enum BmmConstant : std::uint32_t { kWorkgroup = 0, kWgM, kWgN, kTm, kTn4, kBTransposed, kSharedTiles, kKs4, kAdd };

std::string bmm_variant(bool texel, DType a, DType b, DType c) {
    auto bits = [](DType t) { return t == DType::f32 ? "32" : "16"; };
    if (texel) return std::string("bmm_texel_c") + bits(c);
    const std::string name = std::string("bmm_ssbo_a") + bits(a) + "b" + bits(b) + "c" + bits(c);
    if (name != "bmm_ssbo_a32b32c32" && name != "bmm_ssbo_a16b16c32" && name != "bmm_ssbo_a32b16c16" &&
        name != "bmm_ssbo_a32b16c32" && name != "bmm_ssbo_a16b16c16")
        throw Error("internal: no bmm variant " + name + ".");
    return name;
}

}  // namespace

const vk::Kernel& bmm_kernel(Runtime& runtime, const BmmConfig& c, bool b_transposed, DType a, DType b, DType out,
                             BmmAdd add) {
    const vk::KernelKey key{
        .shader = bmm_variant(c.texel, a, b, out),
        .constants = {
            {.id = kWorkgroup, .value = c.wg_m * c.wg_n},
            {.id = kWgM, .value = c.wg_m},
            {.id = kWgN, .value = c.wg_n},
            {.id = kTm, .value = c.tm},
            {.id = kTn4, .value = c.tn4},
            {.id = kBTransposed, .value = b_transposed ? 1u : 0u},
            {.id = kSharedTiles, .value = c.shared_tiles ? 1u : 0u},
            {.id = kKs4, .value = c.ks4},
            {.id = kAdd, .value = static_cast<std::uint32_t>(add)},
        }};
    return runtime.kernels().get(key);
}

const vk::Kernel& softmax_kernel(Runtime& runtime, const SoftmaxConfig& c) {
    const vk::KernelKey key{
        .shader = c.subgroup_ops ? "softmax_subgroup" : "softmax_shared",
        .constants = {{.id = 0, .value = c.workgroup}},  // WG, also the local size
    };
    return runtime.kernels().get(key);
}

const vk::Kernel& flash_kernel(Runtime& runtime, const FusedConfig& c, DType dtype, bool split,
                               std::uint32_t paged_pools) {
    // flash.comp's constant_ids.
    enum FlashConstant : std::uint32_t {
        kWorkgroupSize = 0, kSubgroup, kRows, kKeysPerLane, kDv4, kSplit, kSubgroups, kStage, kKd4, kVw4, kPools
    };
    if (paged_pools > kMaxPagedPools) throw Error("internal: flash.comp binds at most 4 pools.");
    const bool out16 = dtype == DType::f16 && !split;  // split partials are fp32
    std::string shader = paged_pools > 0 ? "flash_paged_" : "flash_";
    if (c.texel) shader += out16 ? "texel_o16" : "texel_o32";
    else if (dtype == DType::f32) shader += "ssbo_in32_o32";
    else shader += out16 ? "ssbo_in16_o16" : "ssbo_in16_o32";
    const vk::KernelKey key{
        .shader = shader,
        .constants = {
            {.id = kWorkgroupSize, .value = c.subgroups * c.subgroup},
            {.id = kSubgroup, .value = c.subgroup},
            {.id = kRows, .value = c.rows},
            {.id = kKeysPerLane, .value = c.keys_per_lane},
            {.id = kDv4, .value = c.dv4},
            {.id = kSplit, .value = split ? 1u : 0u},
            {.id = kSubgroups, .value = c.subgroups},
            {.id = kStage, .value = c.staged ? 1u : 0u},
            {.id = kKd4, .value = c.kd4},
            {.id = kVw4, .value = c.v_width4},
            {.id = kPools, .value = std::max(paged_pools, 1u)},
        },
        .required_subgroup_size = c.require_subgroup ? c.subgroup : 0u};
    return runtime.kernels().get(key);
}

const vk::Kernel& combine_kernel(Runtime& runtime, DType dtype) {
    const vk::KernelKey key{
        .shader = dtype == DType::f32 ? "combine_o32" : "combine_o16",
        .constants = {{.id = 0, .value = 64}},  // WG, also the local size: columns of one row
    };
    return runtime.kernels().get(key);
}

const vk::Kernel& kv_append_kernel(Runtime& runtime, DType in, DType out, bool paged) {
    auto bits = [](DType t) {
        if (t != DType::f32 && t != DType::f16) throw Error("internal: no kv_append variant for " + to_string(t) + ".");
        return t == DType::f32 ? "32" : "16";
    };
    const vk::KernelKey key{
        .shader = std::string(paged ? "kv_append_paged_in" : "kv_append_in") + bits(in) + "_out" + bits(out),
        .constants = {{.id = 0, .value = 64}},  // WG, also the local size: features of one row
    };
    return runtime.kernels().get(key);
}

const vk::Kernel& kv_advance_kernel(Runtime& runtime) {
    const vk::KernelKey key{.shader = "kv_append_advance", .constants = {{.id = 0, .value = 64}}};
    return runtime.kernels().get(key);
}

}  // namespace vkattn::detail

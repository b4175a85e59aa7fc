#include "attention/kernels.hpp"

#include "runtime.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// bmm.comp's constant_ids.
enum BmmConstant : std::uint32_t { kWorkgroup = 0, kWgM, kWgN, kTm, kTn4, kBTransposed, kSharedTiles, kKs4 };

std::string bmm_variant(bool texel, DType a, DType b, DType c) {
    auto bits = [](DType t) { return t == DType::f32 ? "32" : "16"; };
    if (texel) return std::string("bmm_texel_c") + bits(c);
    const std::string name = std::string("bmm_ssbo_a") + bits(a) + "b" + bits(b) + "c" + bits(c);
    if (name != "bmm_ssbo_a32b32c32" && name != "bmm_ssbo_a16b16c32" && name != "bmm_ssbo_a32b16c16")
        throw Error("internal: no bmm variant " + name + ".");
    return name;
}

}  // namespace

const vk::Kernel& bmm_kernel(Runtime& runtime, const BmmConfig& c, bool b_transposed, DType a, DType b, DType out) {
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

}  // namespace vkattn::detail

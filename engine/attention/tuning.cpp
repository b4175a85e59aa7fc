#include "attention/tuning.hpp"

namespace vkattn::detail {
namespace {

bool is_cpu(const vk::DeviceCaps& caps) { return caps.kind == vk::DeviceKind::cpu; }

bool texel_supported(const vk::DeviceCaps& caps, DType dtype) {
    return dtype == DType::f32 ? caps.texel_rgba32f : caps.texel_rgba16f;
}

BmmConfig base_bmm(const vk::DeviceCaps& caps, bool texel, const VariantOverrides& overrides) {
    BmmConfig c;
    c.texel = texel;
    // CPU devices (lavapipe): every shared-memory access is a scalar loop over the lanes and
    // barrier() is a coroutine switch, so registers fed by texel loads win (LAVAPIPE.md: 25-40 vs
    // 8-14 GFLOP/s). GPUs: staging K-slices in shared memory saves global bandwidth.
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
    while (c.shared_tiles && (c.block_rows() + c.block_cols()) * c.ks4 * 16 > caps.max_shared_bytes && c.ks4 > 1)
        c.ks4 /= 2;
    if ((c.block_rows() + c.block_cols()) * c.ks4 * 16 > caps.max_shared_bytes) c.shared_tiles = false;  // too small
    return c;
}

}  // namespace

bool texel_aligned(const std::array<std::int64_t, 4>& strides, std::int64_t row_length) {
    return strides[3] == 1 && row_length % 4 == 0 && strides[0] % 4 == 0 && strides[1] % 4 == 0 &&
           strides[2] % 4 == 0;
}

std::string BmmConfig::describe() const {
    return std::string(texel ? "texel" : "ssbo") + (shared_tiles ? "/shared" : "/regs") + " " +
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
    const bool texel_ok = texel_supported(caps, p.dtype);
    const bool want_texel = overrides.texel_loads.value_or(true);
    // Stage 1 reads Q and K rows along Dk; stage 3 reads P rows along Nkv and V rows along Dv.
    // A stage whose rows are not 4-aligned falls back to scalar loads; describe() reports it.
    const bool scores_texel = want_texel && texel_ok && texel_aligned(q_strides, p.Dk) &&
                              texel_aligned(k_strides, p.Dk);
    const bool output_texel = want_texel && texel_ok && caps.texel_rgba32f && p.Nkv % 4 == 0 &&
                              texel_aligned(v_strides, p.Dv);
    c.scores = base_bmm(caps, scores_texel, overrides);
    c.output = base_bmm(caps, output_texel, overrides);
    // Subgroup reductions where the device has them; the shared-memory tree otherwise.
    c.softmax.subgroup_ops = overrides.subgroup_ops.value_or(caps.subgroup_arithmetic) && caps.subgroup_arithmetic;
    // 64 invocations: 8 AVX lanes × 8 subgroups on lavapipe, 1-2 warps/wavefronts on GPUs.
    c.softmax.workgroup = 64;
    while (c.softmax.workgroup > caps.max_workgroup_invocations) c.softmax.workgroup /= 2;
    return c;
}

BmmConfig choose_gemm(const vk::DeviceCaps& caps, std::int64_t m, std::int64_t n, std::int64_t k,
                      const VariantOverrides& overrides) {
    (void)m;
    const bool texel = overrides.texel_loads.value_or(true) && caps.texel_rgba32f && n % 4 == 0 && k % 4 == 0;
    return base_bmm(caps, texel, overrides);
}

}  // namespace vkattn::detail

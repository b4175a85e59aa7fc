// What the engine's tuning chooses on the suite's device, for tests whose shapes must reach a kernel
// variant (column passes, 4 output slots per lane) whatever the device's subgroup size and shared
// memory: the tuning functions themselves answer, so that a test and the engine share one rule.
#pragma once

#include "support/catch.hpp"

#include <cstdint>
#include <string>

#include "attention/problem.hpp"
#include "attention/tuning.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/testing/attention_case.hpp"

namespace vkattn::test {

inline const vk::DeviceCaps& device_caps() { return detail::ContextAccess::runtime(gpu_context()).device().caps(); }

// Whether the cooperative-matrix kernels run bf16 operands on the suite's device: their portable
// implementation, or matrix units that take bf16; elsewhere (units without it) detail::
// coopmat_operands refuses them by name, and a test expects that refusal.
inline bool coopmat_bf16_runs_here() { return !device_caps().matrix_units || device_caps().bf16_matrix_units; }
// The same for the workgroup-matrix forward (flash_cm2.comp): its portable twin, or the driver's
// workgroup matrices where they take bf16 operands too.
// (at the default tile's 4 subgroups, which the driver's bf16 granularities must take).
inline bool workgroup_bf16_runs_here() {
    const vk::DeviceCaps& caps = device_caps();
    return coopmat_bf16_runs_here() &&
           (!caps.workgroup_matrices ||
            (caps.workgroup_bf16_matrices && vk::granularity_at(caps.workgroup_matrix_bf16_granularity, 4 * caps.subgroup_size)));
}

// Heads past 128 (Dk or Dv) for the cooperative-matrix kernels, which on the device's matrix units
// refuse them by name (detail::refuse_wide_heads_on_units): there `run` must throw that refusal and
// the function returns false; elsewhere (their portable implementation) it returns true, and the
// caller runs its case.
template <class Run>
bool wide_heads_run_here(Run&& run) {
    if (!device_caps().matrix_units) return true;
    try {
        run();
        FAIL("heads past 128 taken on the matrix units");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.fused_kernel");
        CHECK_THAT(e.what(), Catch::Contains("heads up to 128 wide"));
    }
    return false;
}

// What the heuristics see of case c (a testing::Case or a BackwardCase): its tensors dense
// ([B][H][N][D], contiguous) of its shapes and types, with `variant`.
template <class C>
detail::AttentionSpec dense_spec(const C& c, const VariantOverrides& variant) {
    auto dense = [&](DType type, std::int64_t H, std::int64_t N, std::int64_t D) {
        return detail::TensorLayout{type, {c.B, H, N, D}, {H * N * D, N * D, D, 1}};
    };
    detail::AttentionSpec spec;
    spec.q = dense(c.dtype, c.Hq, c.Nq, c.Dk);
    spec.k = dense(c.k_dtype.value_or(c.dtype), c.Hkv, c.Nkv, c.Dk);
    spec.v = dense(c.v_dtype.value_or(c.dtype), c.Hkv, c.Nkv, c.Dv);
    spec.o = dense(c.dtype, c.Hq, c.Nq, c.Dv);
    spec.options.variant = variant;
    return spec;
}

// The fused (and split) kernel's configuration for case c on the suite's device, from its shapes,
// types and variant overrides; dense tensors, whose strides decide only the loads (and the
// cooperative-matrix kernel's staging, which the run settles from them: CoopmatLayout::ahead_with;
// this config holds the layout's assumption, right for dense rows).
// Fails the test where the device cannot run the fused kernel for c.
inline detail::FusedConfig fused_config(const testing::Case& c) {
    const detail::AttentionSpec spec = dense_spec(c, c.variant);
    const detail::Problem p = detail::resolve(spec);
    std::string why;
    const auto config =
        detail::choose_fused(device_caps(), p, spec.q.strides, spec.k.strides, spec.v.strides, c.variant, &why);
    INFO("the fused kernel cannot run Dk=" << c.Dk << " Dv=" << c.Dv << " here: " << why);
    REQUIRE(config);
    return *config;
}

}  // namespace vkattn::test

#include "vkattn/testing/workgroup_matrix_probe.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <random>

#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "attention/workgroup_matrices.hpp"
#include "context_state.hpp"
#include "plan/program.hpp"
#include "tensor/storage.hpp"
#include "testing/timed_runs.hpp"
#include "vkattn/context.hpp"
#include "vkattn/device_tensor.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::testing {

std::optional<std::vector<WorkgroupMatrixCheck>> probe_workgroup_matrices(Context& context) {
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const std::uint32_t invocations = detail::workgroup_probe_invocations(runtime.device().caps());
    if (invocations == 0) return std::nullopt;
    constexpr int kN = 64, kRows = 80, kRegions = 11, kRegion = kN * kN;
    // X: small integers, so that every product, maximum and sum below is exact in f16 and fp32.
    std::mt19937 rng(0x3c3c);
    std::uniform_int_distribution<int> value(-8, 8);
    std::vector<float> x(kRows * kN);
    for (float& e : x) e = static_cast<float>(value(rng));
    std::vector<std::uint16_t> x_bits(x.size());
    std::transform(x.begin(), x.end(), x_bits.begin(), [](float f) { return float_to_half(f); });
    const DeviceTensor x_tensor =
        DeviceTensor::from_host(context, make_view(static_cast<const void*>(x_bits.data()), DType::f16, Layout::bhnd, {1, 1, kRows, kN}));
    const DeviceTensor out = DeviceTensor::empty(context, DType::f32, {1, 1, kRegions, kRegion});
    const vk::Buffer& x_buffer = detail::TensorAccess::storage(x_tensor)->buffer;
    const vk::Buffer& out_buffer = detail::TensorAccess::storage(out)->buffer;

    detail::Program program(runtime);
    program.dispatch({.kernel = &detail::workgroup_probe_kernel(runtime, invocations),
                      .params = detail::ClockProbeParams{},  // the probe reads no parameters
                      .bindings = {{1, &x_buffer, 0, x_buffer.size()}, {2, &out_buffer, 0, out_buffer.size()}},
                      .groups = {1, 1, 1}});
    timing::timed_runs(
        runtime, WarmUp(0), 1, [](detail::BatchState&) {},
        [&](detail::BatchState&, VkCommandBuffer commands) { program.replay(commands); }, [](detail::BatchState&) {});
    std::vector<float> got(static_cast<std::size_t>(kRegions * kRegion));
    out.download(make_view(static_cast<void*>(got.data()), DType::f32, Layout::bhnd, out.shape()));

    auto at = [&](int r, int c) { return x[static_cast<std::size_t>(r * kN + c)]; };
    auto row_max = [&](int r) {
        float m = at(r, 0);
        for (int c = 1; c < kN; ++c) m = std::max(m, at(r, c));
        return m;
    };
    auto row_sum = [&](int r) {
        float s = 0;
        for (int c = 0; c < kN; ++c) s += at(r, c);
        return s;
    };
    struct Expect {
        const char* name;
        int columns;
        std::function<float(int, int)> want;
    };
    const std::array<Expect, kRegions> expected{{
        {"a tensor load through a transposed view (B = Xt)", kN, [&](int r, int c) { return at(c, r); }},
        {"a tensor load (B = X)", kN, [&](int r, int c) { return at(r, c); }},
        {"a row reduction (max) into 16 columns", 16, [&](int r, int) { return row_max(r); }},
        {"16 columns widened to 64 by a row reduction", kN, [&](int r, int) { return row_max(r); }},
        {"a row reduction (sum) into 16 columns", 16, [&](int r, int) { return row_sum(r); }},
        {"an element operation's row and column", kN, [&](int r, int c) { return static_cast<float>(r * kN + c); }},
        {"a tensor load clamped to 50 x 40 rows and columns (zero past)", kN,
         [&](int r, int c) { return r < 50 && c < 40 ? at(r, c) : 0.0f; }},
        {"a tensor load at an offset of 8 rows", kN, [&](int r, int c) { return at(r + 8, c); }},
        {"an fp32 accumulator converted to an f16 A operand", kN, [&](int r, int c) { return at(r, c); }},
        {"a load from shared memory, row-major (B = X)", kN, [&](int r, int c) { return at(r, c); }},
        {"a load from shared memory, column-major (B = Xt)", kN, [&](int r, int c) { return at(c, r); }},
    }};
    std::vector<WorkgroupMatrixCheck> checks;
    for (int region = 0; region < kRegions; ++region) {
        const Expect& e = expected[static_cast<std::size_t>(region)];
        WorkgroupMatrixCheck check{.name = e.name, .elements = kN * e.columns};
        for (int r = 0; r < kN; ++r)
            for (int c = 0; c < e.columns; ++c) {
                const float g = got[static_cast<std::size_t>(region * kRegion + r * e.columns + c)], w = e.want(r, c);
                if (g == w) continue;
                if (check.mismatches++ == 0) {
                    check.first = r * e.columns + c;
                    check.got = g;
                    check.want = w;
                }
            }
        checks.push_back(check);
    }
    return checks;
}

}  // namespace vkattn::testing

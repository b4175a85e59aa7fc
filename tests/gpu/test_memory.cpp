// The fused path's memory is O(N·D): attention at N = 32768 (an N² score matrix would be 8 GiB for
// its 2 heads) completes on lavapipe within a small device footprint. The full reference would take
// hours at this size, so sampled rows are checked against a direct double-precision computation.
// Two heads, not more: the footprint's bound is per tensor, and each head is ~9 s of both of
// lavapipe's cores (8 heads took 71 s of the suite's run, twice in CI).
// Hidden from the default listing ([.]): tests/CMakeLists.txt runs it on its own (RUN_SERIAL), as it
// takes both cores.
#include "support/catch.hpp"

#include <cmath>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;

TEST_CASE("memory: fused causal attention at N = 32768 stays O(N*D)", "[gpu][memory][.]") {
    const std::int64_t B = 1, H = 2, N = 32768, D = 64;
    std::mt19937 rng(32768);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> q(static_cast<std::size_t>(B * H * N * D)), k(q.size()), v(q.size()), o(q.size(), NAN);
    for (auto* t : {&q, &k, &v})
        for (auto& x : *t) x = dist(rng);
    const std::array<std::int64_t, 4> shape{B, H, N, D};
    const AttentionInputs in{.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, shape),
                             .k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, shape),
                             .v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, shape)};
    const AttentionOutputs out{.o = make_view<void*>(o.data(), DType::f32, Layout::bhnd, shape)};
    Context& ctx = vkattn::test::gpu_context();
    const AttentionReport report = attention(ctx, in, out, {.causal = Causal::top_left, .impl = Impl::fused});

    const double n_squared_bytes = static_cast<double>(B * H) * N * N * 4;
    WARN("fused N=32768 D=64 causal: device memory " << report.device_bytes / (1 << 20) << " MiB (an N^2 score matrix: "
                                                     << n_squared_bytes / (1 << 30) << " GiB), " << report.gpu_ms << " ms");
    CHECK(static_cast<double>(report.device_bytes) < n_squared_bytes / 100);
    // q, k, v and o (B·H·N·D each) and the lse (B·H·N): nothing grows with N².
    const auto tensor_bytes = static_cast<std::uint64_t>(B * H * N * D * 4);
    CHECK(report.device_bytes < 5 * tensor_bytes);

    // Sampled rows of several heads, against double precision.
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (const auto& [h, i] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {1, 1}, {0, 4095}, {1, 32767}, {1, 20000}}) {
        std::vector<double> s(static_cast<std::size_t>(i + 1));
        double m = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (std::int64_t d = 0; d < D; ++d) dot += double(q[((h * N) + i) * D + d]) * k[((h * N) + j) * D + d];
            s[j] = dot * scale;
            m = std::max(m, s[j]);
        }
        double l = 0;
        for (auto& x : s) l += (x = std::exp(x - m));
        double err2 = 0, ref2 = 0;
        for (std::int64_t d = 0; d < D; ++d) {
            double ref = 0;
            for (std::int64_t j = 0; j <= i; ++j) ref += s[j] / l * v[((h * N) + j) * D + d];
            const double got = o[((h * N) + i) * D + d];
            err2 += (got - ref) * (got - ref);
            ref2 += ref * ref;
        }
        INFO("head " << h << " row " << i);
        CHECK(std::sqrt(err2 / ref2) < testing::tolerance_for(DType::f32).rel);
    }
    CHECK(vkattn::test::take_validation_messages(ctx).empty());
}

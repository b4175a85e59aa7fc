// What each storage type of K and V costs in accuracy: attention (the CPU reference) over K and V
// stored in the type against the same attention over the original float32 K and V. The kernels
// agree with the reference on the stored values to fp32 level ([storage_types]), so this is the
// error a user sees. docs/SEMANTICS.md's table holds the measured values; this test fails when a
// type's error grows past twice its entry (a changed encoder, a lost rounding).
#include "support/catch.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "vkattn/quantize.hpp"
#include "vkattn/reference.hpp"

using namespace vkattn;

namespace {

constexpr std::int64_t kB = 2, kH = 4, kNq = 16, kNkv = 256, kD = 128;

// Relative L2 error of attention with K and V stored in `type` (rows quantized as vkattn::quantize_row
// does; fp8 at scale 1 over values in [-1, 1], as a calibrated scale would place them).
double output_error(DType type, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
    const std::array<std::int64_t, 4> q_shape{kB, kH, kNq, kD}, kv_shape{kB, kH, kNkv, kD};
    std::vector<std::uint8_t> kq(row_bytes(type, kD) * kB * kH * kNkv), vq(kq.size());
    for (std::int64_t r = 0; r < kB * kH * kNkv; ++r)
        for (auto [from, to] : {std::pair{&k, &kq}, std::pair{&v, &vq}})
            quantize_row(type, {from->data() + r * kD, static_cast<std::size_t>(kD)},
                         {to->data() + r * row_bytes(type, kD), row_bytes(type, kD)});
    std::vector<float> exact(static_cast<std::size_t>(kB * kH * kNq * kD)), stored(exact.size());
    const auto q_view = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, q_shape);
    reference_attention({.q = q_view,
                         .k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, kv_shape),
                         .v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, kv_shape)},
                        {.o = make_view<void*>(exact.data(), DType::f32, Layout::bhnd, q_shape)});
    reference_attention({.q = q_view,
                         .k = make_view<const void*>(kq.data(), type, Layout::bhnd, kv_shape),
                         .v = make_view<const void*>(vq.data(), type, Layout::bhnd, kv_shape)},
                        {.o = make_view<void*>(stored.data(), DType::f32, Layout::bhnd, q_shape)});
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
        diff += (double(stored[i]) - exact[i]) * (double(stored[i]) - exact[i]);
        norm += double(exact[i]) * exact[i];
    }
    return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("each storage type of K and V costs the error docs/SEMANTICS.md's table says", "[quantize][accuracy]") {
    std::mt19937 rng(2026);
    // q, k in [-2, 2] (scores of a few units: softmax neither flat nor one-hot), v in [-1, 1].
    std::uniform_real_distribution<float> wide(-2.0f, 2.0f), unit(-1.0f, 1.0f);
    std::vector<float> q(static_cast<std::size_t>(kB * kH * kNq * kD)), k(static_cast<std::size_t>(kB * kH * kNkv * kD)), v(k.size());
    for (auto& x : q) x = wide(rng);
    for (auto& x : k) x = wide(rng) * 0.5f;
    for (auto& x : v) x = unit(rng);
    // The table's values (relative L2 error of O, this test's data).
    const std::pair<DType, double> table[] = {
        {DType::f16, 2.2e-4},     {DType::bf16, 1.8e-3},     {DType::q8_0, 4.6e-3}, {DType::q5_1, 3.6e-2},
        {DType::q5_0, 3.7e-2},    {DType::q4_1, 7.3e-2},     {DType::q4_0, 8.0e-2}, {DType::iq4_nl, 8.1e-2},
        {DType::fp8_e4m3, 2.8e-2}, {DType::fp8_e5m2, 5.6e-2},
    };
    for (const auto& [type, expected] : table) {
        const double error = output_error(type, q, k, v);
        INFO(to_string(type) << ": relative L2 error " << error << ", the table's " << expected);
        CHECK(error <= 2.0 * expected);
        CHECK(error >= 0.5 * expected);  // far below: the table (or the type's encoder) is stale
    }
}

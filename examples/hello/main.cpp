// Attention on host data with vkattn: 2 heads, 5 queries, 7 keys, head dimension 16, causal.
#include <cmath>
#include <cstdio>
#include <vector>

#include <vkattn/vkattn.hpp>

int main() {
    const std::int64_t B = 1, H = 2, Nq = 5, Nkv = 7, D = 16;
    std::vector<float> q(B * H * Nq * D), k(B * H * Nkv * D), v(B * H * Nkv * D), o(B * H * Nq * D);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.1f * static_cast<float>(i));
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.07f * static_cast<float>(i));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.05f * static_cast<float>(i) + 1.0f);

    using vkattn::DType, vkattn::Layout;
    vkattn::Context context;  // the best device: a GPU, or lavapipe on the CPU
    vkattn::AttentionInputs in{
        .q = vkattn::make_view<const void*>(q.data(), DType::f32, Layout::bhnd, {B, H, Nq, D}),
        .k = vkattn::make_view<const void*>(k.data(), DType::f32, Layout::bhnd, {B, H, Nkv, D}),
        .v = vkattn::make_view<const void*>(v.data(), DType::f32, Layout::bhnd, {B, H, Nkv, D})};
    vkattn::AttentionOutputs out{.o = vkattn::make_view<void*>(o.data(), DType::f32, Layout::bhnd, {B, H, Nq, D})};
    const auto report = vkattn::attention(context, in, out, {.causal = vkattn::Causal::bottom_right});

    // Check against the CPU reference that ships with the library.
    std::vector<float> ref(o.size());
    vkattn::AttentionOutputs ref_out{.o = vkattn::make_view<void*>(ref.data(), DType::f32, Layout::bhnd, {B, H, Nq, D})};
    vkattn::reference_attention(in, ref_out, {.causal = vkattn::Causal::bottom_right});
    double worst = 0;
    for (std::size_t i = 0; i < o.size(); ++i) worst = std::fmax(worst, std::fabs(o[i] - ref[i]));
    std::printf("%s on %s: o[0][0][0][0..3] = %.5f %.5f %.5f %.5f, max |gpu - cpu| = %.2e\n",
                report.variant.c_str(), context.device().name.c_str(), o[0], o[1], o[2], o[3], worst);
    return worst < 1e-4 ? 0 : 1;
}

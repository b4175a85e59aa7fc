// Determinism: the same request on the same device gives bit-identical results, run after run, in
// every path and dtype (with masks, features and dropout), and for the multi-head layer. Nothing in
// the kernels depends on timing: no atomics, fixed reduction orders, fixed split boundaries.
#include "support/catch.hpp"

#include <cstring>
#include <random>

#include "support/expect_case.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

struct Run {
    std::vector<std::byte> o;
    std::vector<float> lse, weights;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    // memcmp must not see the null data() of an empty vector (UBSan), so sizes come first.
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("determinism: repeated runs are bit-identical in every path and dtype", "[gpu][determinism]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    std::mt19937 rng(test::fresh_seed());
    const std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 77, Nkv = 301, D = 40;
    const HostTensor q = random_tensor(rng, dtype, Layout::bhnd, {B, Hq, Nq, D});
    const HostTensor k = random_tensor(rng, dtype, Layout::bhnd, {B, Hkv, Nkv, D});
    const HostTensor v = random_tensor(rng, dtype, Layout::bhnd, {B, Hkv, Nkv, D});
    std::vector<float> bias(static_cast<std::size_t>(Nq * Nkv));
    for (auto& x : bias) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    const std::vector<float> sinks{0.1f, -0.3f, 0.7f, 1.2f};
    AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .sinks = sinks};
    in.float_mask = MaskView{bias.data(), {Nq, Nkv}};
    const AttentionOptions options{.causal = Causal::bottom_right, .window = {100, -1}, .softcap = 20.0,
                                   .alibi_max_bias = 8.0, .dropout = 0.1, .seed = 5, .impl = impl,
                                   .splits = impl == Impl::split ? 4u : 0u};
    auto once = [&] {
        HostTensor o = nan_tensor(dtype, Layout::bhnd, {B, Hq, Nq, D});
        Run r;
        r.lse.assign(static_cast<std::size_t>(B * Hq * Nq), 0.0f);
        if (impl == Impl::unfused) r.weights.assign(static_cast<std::size_t>(B * Hq * Nq * Nkv), 0.0f);
        attention(test::gpu_context(), in,
                  {.o = o.mutable_view(), .weights = r.weights.empty() ? nullptr : r.weights.data(), .lse = r.lse.data()},
                  options);
        const auto* bytes = dtype == DType::f32 ? reinterpret_cast<const std::byte*>(o.f32.data())
                                                : reinterpret_cast<const std::byte*>(o.f16.data());
        r.o.assign(bytes, bytes + o.count() * static_cast<std::int64_t>(size_of(dtype)));
        return r;
    };
    const Run first = once();
    for (int repeat = 0; repeat < 3; ++repeat) {
        const Run again = once();
        CHECK(again.o == first.o);
        CHECK(same_bits(again.lse, first.lse));
        CHECK(same_bits(again.weights, first.weights));
    }
    CHECK(test::take_validation_messages(test::gpu_context()).empty());
}

TEST_CASE("determinism: the multi-head layer is bit-identical run after run", "[gpu][determinism][mha]") {
    std::mt19937 rng(test::fresh_seed());
    const std::int64_t E = 32, H = 4, L = 13, N = 3;
    std::uniform_real_distribution<float> d(-0.3f, 0.3f);
    std::vector<float> w(3 * E * E), b(3 * E), wo(E * E), bo(E), x(L * N * E);
    for (auto* t : {&w, &b, &wo, &bo, &x})
        for (auto& value : *t) value = d(rng);
    const MultiHeadAttention layer({.embed_dim = E, .num_heads = H},
                                   {.in_proj_weight = w, .in_proj_bias = b, .out_proj_weight = wo, .out_proj_bias = bo});
    const Impl impl = GENERATE(Impl::unfused, Impl::fused);
    auto once = [&] {
        std::vector<float> out(x.size()), weights(impl == Impl::unfused ? static_cast<std::size_t>(N * L * L) : 0);
        layer.forward(test::gpu_context(), {.query = {x.data(), {L, N, E}}},
                      {out.data(), weights.empty() ? nullptr : weights.data()}, {.impl = impl});
        out.insert(out.end(), weights.begin(), weights.end());
        return out;
    };
    const std::vector<float> first = once();
    for (int repeat = 0; repeat < 3; ++repeat) CHECK(same_bits(once(), first));
}

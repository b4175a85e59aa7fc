// Numerics at the edges, in every path: NaN and infinity in the inputs propagate as
// docs/SEMANTICS.md says (the same rows as the reference turn NaN, the others stay exact), extreme
// scales keep the softmax stable, and masks that leave one key per row pick exactly that key.
#include "support/catch.hpp"

#include <cmath>
#include <limits>
#include <random>

#include "support/expect_case.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Result {
    HostTensor o;
    std::vector<float> lse;
};

Result run(const AttentionInputs& in, const AttentionOptions& options, std::array<std::int64_t, 4> o_shape) {
    Result r{nan_tensor(DType::f32, Layout::bhnd, o_shape), std::vector<float>(static_cast<std::size_t>(o_shape[0] * o_shape[1] * o_shape[2]))};
    attention(test::gpu_context(), in, {.o = r.o.mutable_view(), .lse = r.lse.data()}, options);
    CHECK(test::take_validation_messages(test::gpu_context()).empty());
    return r;
}

AttentionOptions path_options(Impl impl) { return {.impl = impl, .splits = impl == Impl::split ? 3u : 0u}; }

}  // namespace

// With a softcap, an infinite score is capped to ±c (finite, as c·tanh(±∞) is in the reference), but
// a NaN stays NaN: the cap's saturation must not swallow it (GLSL's min(NaN, x) may return x).
TEST_CASE("numerics: NaN or inf in q poisons exactly its own row, as in the reference", "[gpu][numerics]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    const float poison = GENERATE(kNaN, kInf);
    const double softcap = GENERATE(0.0, 30.0);
    std::mt19937 rng(test::fresh_seed());
    const std::int64_t H = 2, N = 37, D = 16;
    HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, N, D});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, N, D});
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, N, D});
    const std::int64_t bad_row = 11;
    INFO(to_string(impl) << " path, q holds " << poison << ", softcap " << softcap);
    q.f32[static_cast<std::size_t>(q.view().offset(0, 1, bad_row, 3))] = poison;
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
    AttentionOptions options = path_options(impl);
    if (softcap > 0.0) options.softcap = softcap;
    const Result r = run(in, options, {1, H, N, D});
    std::vector<float> ref(static_cast<std::size_t>(H * N * D));
    reference_attention(in, {.o = make_view<void*>(ref.data(), DType::f32, Layout::bhnd, {1, H, N, D})}, options);
    // Capped, an infinite q gives finite logits ±c: the row is a number, as in the reference.
    const bool poisoned = std::isnan(poison) || softcap == 0.0;
    for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < N; ++i)
            for (std::int64_t d = 0; d < D; ++d) {
                const float got = r.o.at(0, h, i, d), want = ref[static_cast<std::size_t>((h * N + i) * D + d)];
                INFO("h " << h << " i " << i << " d " << d << ": gpu " << got << " reference " << want);
                if (h == 1 && i == bad_row && poisoned) {
                    CHECK(std::isnan(got));
                    CHECK(std::isnan(r.lse[static_cast<std::size_t>(h * N + i)]));
                    CHECK(std::isnan(want));
                } else {
                    CHECK(got == Approx(want).epsilon(1e-5).margin(1e-6));
                }
            }
}

TEST_CASE("numerics: extreme scales stay finite and match the reference", "[gpu][numerics]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    // Tiny scales make the softmax uniform, huge ones one-hot (|scale| up to 1e8: logits near 1e9).
    // Moderate ones in between (1e3 here) are ill-conditioned: a logit's fp32 rounding, ~1e-7·|logit|,
    // moves near-tied weights by more than the fp32 tolerance, on any implementation.
    const double scale = GENERATE(1e-30, 1e-6, 1e6, -1e8);
    Case c;
    c.B = 1;
    c.Hq = c.Hkv = 2;
    c.Nq = 21;
    c.Nkv = 90;
    c.Dk = c.Dv = 32;
    c.scale = scale;
    c.impl = impl;
    c.weights = impl == Impl::unfused;
    c.splits = impl == Impl::split ? 3 : 0;
    c.causal = Causal::bottom_right;
    test::expect_pass(c, impl);
}

TEST_CASE("numerics: a mask that leaves one key per row returns exactly that key's value", "[gpu][numerics]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    std::mt19937 rng(test::fresh_seed());
    const std::int64_t H = 3, Nq = 29, Nkv = 70, D = 12;
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, Nq, D}, 50.0f);
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, Nkv, D}, 50.0f);
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, Nkv, D});
    std::vector<std::uint8_t> one(static_cast<std::size_t>(H * Nq * Nkv), 0);
    std::vector<std::int64_t> chosen(static_cast<std::size_t>(H * Nq));
    for (std::size_t row = 0; row < chosen.size(); ++row) {
        chosen[row] = std::uniform_int_distribution<std::int64_t>(0, Nkv - 1)(rng);
        one[row * Nkv + static_cast<std::size_t>(chosen[row])] = 1;
    }
    AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
    in.bool_mask = MaskView{one.data(), {1, H, Nq, Nkv}};
    const Result r = run(in, path_options(impl), {1, H, Nq, D});
    for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < Nq; ++i)
            for (std::int64_t d = 0; d < D; ++d)
                CHECK(r.o.at(0, h, i, d) == Approx(v.at(0, h, chosen[static_cast<std::size_t>(h * Nq + i)], d)).epsilon(1e-6));
}

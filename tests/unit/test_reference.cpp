// The CPU reference against hand-derived or independently computed expectations: causal alignment,
// key lengths, masks, GQA, layouts and strides, huge logits, fp16, its stages and its argument checks.
// The independent computation (naive(), support/naive_attention.hpp) works on dense [B, H, N, D]
// arrays with a visibility predicate written out per test, and a softmax without the max
// subtraction: it shares no code with the reference.
#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "vkattn/dropout.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/reference.hpp"
#include "support/naive_attention.hpp"

using namespace vkattn;
using namespace vkattn::test;

TEST_CASE("reference: causal alignment when Nq < Nkv (2 x 5)", "[reference]") {
    std::mt19937 rng(1001);
    const auto q = random_tensor(rng, {1, 2, 2, 4}), k = random_tensor(rng, {1, 2, 5, 4}),
               v = random_tensor(rng, {1, 2, 5, 3});
    // top-left: row 0 sees key 0, row 1 keys 0..1. bottom-right (offset Nkv - Nq = 3): row 0 sees
    // keys 0..3, row 1 all five.
    const int last_visible[2][2] = {{0, 1}, {3, 4}};
    for (int mode = 0; mode < 2; ++mode) {
        AttentionOptions opt;
        opt.causal = mode == 0 ? Causal::top_left : Causal::bottom_right;
        INFO("causal " << to_string(opt.causal));
        const auto r = run(q, k, v, {}, opt);
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 5; ++j)
                    CHECK((r.weights[static_cast<std::size_t>((h * 2 + i) * 5 + j)] > 0.0f) ==
                          (j <= last_visible[mode][i]));
        const auto e = naive(q, k, v, 0.5, [&](auto, auto, auto i, auto j) {
            return j <= last_visible[mode][i];
        });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.weights, e.weights) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
    }
}

TEST_CASE("reference: causal alignment when Nq > Nkv (5 x 2)", "[reference]") {
    std::mt19937 rng(1002);
    const auto q = random_tensor(rng, {1, 1, 5, 4}), k = random_tensor(rng, {1, 1, 2, 4}),
               v = random_tensor(rng, {1, 1, 2, 3});
    SECTION("top-left: every row sees key 0, rows 1..4 both keys") {
        AttentionOptions opt;
        opt.causal = Causal::top_left;
        const auto r = run(q, k, v, {}, opt);
        CHECK(r.weights[0] == 1.0f);  // row 0: only key 0, so O = V[0] exactly
        CHECK(r.weights[1] == 0.0f);
        for (int d = 0; d < 3; ++d) CHECK(r.o[static_cast<std::size_t>(d)] == v.at(0, 0, 0, d));
        for (int i = 1; i < 5; ++i) {
            CHECK(r.weights[static_cast<std::size_t>(2 * i)] > 0.0f);
            CHECK(r.weights[static_cast<std::size_t>(2 * i + 1)] > 0.0f);
        }
        const auto e = naive(q, k, v, 0.5, [](auto, auto, auto i, auto j) { return j <= i; });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
    }
    SECTION("bottom-right: rows 0..2 see nothing, row 3 key 0, row 4 both") {
        AttentionOptions opt;
        opt.causal = Causal::bottom_right;
        const auto r = run(q, k, v, {}, opt);
        CHECK_FALSE(any_nan(r.o));
        CHECK_FALSE(any_nan(r.weights));
        CHECK_FALSE(any_nan(r.lse));
        for (int i = 0; i < 3; ++i) {
            CHECK(r.lse[static_cast<std::size_t>(i)] == -kInf);
            for (int d = 0; d < 3; ++d) CHECK(r.o[static_cast<std::size_t>(i * 3 + d)] == 0.0f);
            for (int j = 0; j < 2; ++j) CHECK(r.weights[static_cast<std::size_t>(i * 2 + j)] == 0.0f);
        }
        CHECK(r.weights[6] == 1.0f);
        CHECK(r.weights[7] == 0.0f);
        for (int d = 0; d < 3; ++d) CHECK(r.o[static_cast<std::size_t>(9 + d)] == v.at(0, 0, 0, d));
        const auto e = naive(q, k, v, 0.5, [](auto, auto, auto i, auto j) { return j <= i - 3; });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.weights, e.weights) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
    }
}

TEST_CASE("reference: kv_lengths of 0 give empty rows and others mask the tail", "[reference]") {
    std::mt19937 rng(1003);
    const auto q = random_tensor(rng, {3, 2, 3, 4}), k = random_tensor(rng, {3, 2, 6, 4}),
               v = random_tensor(rng, {3, 2, 6, 5});
    const std::vector<std::int32_t> lengths{0, 4, 6};
    AttentionInputs extra;
    extra.kv_lengths = lengths;
    for (auto causal : {Causal::none, Causal::bottom_right}) {
        AttentionOptions opt;
        opt.causal = causal;
        INFO("causal " << to_string(causal));
        const auto r = run(q, k, v, extra, opt);
        CHECK_FALSE(any_nan(r.o));
        CHECK_FALSE(any_nan(r.weights));
        for (int row = 0; row < 6; ++row) CHECK(r.lse[static_cast<std::size_t>(row)] == -kInf);
        const auto e = naive(q, k, v, 0.5, [&](auto b, auto, auto i, auto j) {
            const std::int64_t len = lengths[static_cast<std::size_t>(b)];
            return j < len && (causal == Causal::none || j <= i + len - 3);
        });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.weights, e.weights) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
    }
}

TEST_CASE("reference: a bool mask that empties a row", "[reference]") {
    std::mt19937 rng(1004);
    const auto q = random_tensor(rng, {2, 2, 4, 3}), k = random_tensor(rng, {2, 2, 5, 3}),
               v = random_tensor(rng, {2, 2, 5, 4});
    std::vector<std::uint8_t> mask(2 * 4 * 5);  // shape [B, 1, Nq, Nkv]
    std::bernoulli_distribution coin(0.6);
    for (auto& m : mask) m = coin(rng) ? 1 : 0;
    for (int j = 0; j < 5; ++j) mask[static_cast<std::size_t>((0 * 4 + 2) * 5 + j)] = 0;  // b0 row 2
    mask[(1 * 4 + 1) * 5 + 3] = 7;  // any non-zero byte attends
    AttentionInputs extra;
    extra.bool_mask = MaskView{mask.data(), {2, 1, 4, 5}};
    const auto r = run(q, k, v, extra);
    CHECK_FALSE(any_nan(r.o));
    for (int h = 0; h < 2; ++h) {
        CHECK(r.lse[static_cast<std::size_t>(h * 4 + 2)] == -kInf);
        for (int d = 0; d < 4; ++d) CHECK(r.o[static_cast<std::size_t>((h * 4 + 2) * 4 + d)] == 0.0f);
    }
    const auto e = naive(q, k, v, 1.0 / std::sqrt(3.0), [&](auto b, auto, auto i, auto j) {
        return mask[static_cast<std::size_t>((b * 4 + i) * 5 + j)] != 0;
    });
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
    CHECK(mismatch(r.lse, e.lse) == "");
}

TEST_CASE("reference: an additive mask, with -inf entries and a row of -inf", "[reference]") {
    std::mt19937 rng(1005);
    const auto q = random_tensor(rng, {1, 3, 4, 6}), k = random_tensor(rng, {1, 3, 5, 6}),
               v = random_tensor(rng, {1, 3, 5, 2});
    std::vector<float> mask = random_tensor(rng, {1, 1, 4, 5}, -2.0f, 2.0f).data;  // [Nq, Nkv]
    for (int j = 0; j < 5; ++j) mask[static_cast<std::size_t>(1 * 5 + j)] = -INFINITY;  // row 1
    mask[3 * 5 + 2] = -INFINITY;
    AttentionInputs extra;
    extra.float_mask = MaskView{mask.data(), {4, 5}};
    AttentionOptions opt;
    opt.scale = 0.3;
    const auto r = run(q, k, v, extra, opt);
    CHECK_FALSE(any_nan(r.o));
    CHECK_FALSE(any_nan(r.weights));
    for (int h = 0; h < 3; ++h) {
        CHECK(r.lse[static_cast<std::size_t>(h * 4 + 1)] == -kInf);
        CHECK(r.weights[static_cast<std::size_t>((h * 4 + 3) * 5 + 2)] == 0.0f);
        for (int d = 0; d < 2; ++d) CHECK(r.o[static_cast<std::size_t>((h * 4 + 1) * 2 + d)] == 0.0f);
    }
    const auto add = [&](auto, auto, auto i, auto j) { return double(mask[static_cast<std::size_t>(i * 5 + j)]); };
    const auto e = naive(q, k, v, 0.3, [&](auto, auto, auto i, auto) { return i != 1; }, add);
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
    CHECK(mismatch(r.lse, e.lse) == "");
}

TEST_CASE("reference: grouped-query heads read kv head h / (Hq / Hkv)", "[reference]") {
    std::mt19937 rng(1006);
    const std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 3, Nkv = 6, Dk = 5, Dv = 7;
    const auto q = random_tensor(rng, {B, Hq, Nq, Dk}), k = random_tensor(rng, {B, Hkv, Nkv, Dk}),
               v = random_tensor(rng, {B, Hkv, Nkv, Dv});
    std::vector<float> mask = random_tensor(rng, {1, 1, Nq, Nkv}).data;
    const std::vector<std::int32_t> lengths{6, 4};
    AttentionInputs extra;
    extra.kv_lengths = lengths;
    extra.float_mask = MaskView{mask.data(), {Nq, Nkv}};
    AttentionOptions opt;
    opt.causal = Causal::bottom_right;
    const auto all = run(q, k, v, extra, opt);

    // Each (batch, query head) on its own, against a single-head slice of its kv head.
    const auto slice = [](const Tensor& t, std::int64_t b, std::int64_t h) {
        Tensor s{{1, 1, t.shape[2], t.shape[3]}, {}};
        for (std::int64_t n = 0; n < t.shape[2]; ++n)
            for (std::int64_t d = 0; d < t.shape[3]; ++d) s.data.push_back(t.at(b, h, n, d));
        return s;
    };
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h) {
            INFO("b " << b << ", h " << h);
            const std::int32_t len = lengths[static_cast<std::size_t>(b)];
            AttentionInputs one;
            one.kv_lengths = std::span(&len, 1);
            one.float_mask = extra.float_mask;
            const auto r = run(slice(q, b, h), slice(k, b, h / 2), slice(v, b, h / 2), one, opt);
            const auto row = static_cast<std::size_t>(b * Hq + h);
            CHECK(std::vector<float>(all.o.begin() + static_cast<std::ptrdiff_t>(row * Nq * Dv),
                                     all.o.begin() + static_cast<std::ptrdiff_t>((row + 1) * Nq * Dv)) == r.o);
            CHECK(std::vector<float>(all.lse.begin() + static_cast<std::ptrdiff_t>(row * Nq),
                                     all.lse.begin() + static_cast<std::ptrdiff_t>((row + 1) * Nq)) == r.lse);
        }
}

TEST_CASE("reference: bnhd and padded strides give the bhnd answer", "[reference]") {
    std::mt19937 rng(1007);
    const std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 5, Nkv = 7, Dk = 8, Dv = 4;
    const auto q = random_tensor(rng, {B, Hq, Nq, Dk}), k = random_tensor(rng, {B, Hkv, Nkv, Dk}),
               v = random_tensor(rng, {B, Hkv, Nkv, Dv});
    AttentionOptions opt;
    opt.causal = Causal::top_left;
    const auto bhnd = run(q, k, v, {}, opt, Layout::bhnd);
    const auto bnhd = run(q, k, v, {}, opt, Layout::bnhd);
    CHECK(bhnd.o == bnhd.o);
    CHECK(bhnd.weights == bnhd.weights);
    CHECK(bhnd.lse == bnhd.lse);
    const auto e = naive(q, k, v, 1.0 / std::sqrt(8.0), [](auto, auto, auto i, auto j) { return j <= i; });
    CHECK(mismatch(bhnd.o, e.o) == "");

    // q with padded rows and a padded head stride (poisoned with NaN), other tensors bnhd.
    const Shape padded{Hq * (Nq * (Dk + 3) + 5) + 7, Nq * (Dk + 3) + 5, Dk + 3, 1};
    const auto q_padded = store(q, padded, static_cast<std::size_t>(B * padded[0]));
    const auto k_data = store(k, dense_strides(Layout::bnhd, k.shape), element_count(k.shape));
    const auto v_data = store(v, dense_strides(Layout::bnhd, v.shape), element_count(v.shape));
    std::vector<float> o(element_count({B, Hq, Nq, Dv}));
    AttentionInputs in;
    in.q = TensorView{q_padded.data(), DType::f32, q.shape, padded};
    in.k = make_view<const void*>(k_data.data(), DType::f32, Layout::bnhd, k.shape);
    in.v = make_view<const void*>(v_data.data(), DType::f32, Layout::bnhd, v.shape);
    reference_attention(in, {make_view<void*>(o.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, Dv})}, opt);
    CHECK(o == bhnd.o);
}

TEST_CASE("reference: logits around 1e4 stay finite and correct", "[reference]") {
    std::mt19937 rng(1008);
    // q·k with Dk = 4 and scale 1: the three ranges give mixed-sign, all-negative and all-positive
    // logits of magnitude 1e3..4e4, far beyond exp's range.
    const float ranges[3][4] = {{-100, 100, -100, 100}, {50, 100, -100, -50}, {50, 100, 50, 100}};
    for (const auto& range : ranges) {
        const auto q = random_tensor(rng, {1, 2, 4, 4}, range[0], range[1]);
        const auto k = random_tensor(rng, {1, 2, 6, 4}, range[2], range[3]);
        const auto v = random_tensor(rng, {1, 2, 6, 3});
        AttentionOptions opt;
        opt.scale = 1.0;
        const auto r = run(q, k, v, {}, opt);
        // Expected, by shift invariance: p_j = 1 / Σ_l exp(s_l - s_j) (an overflow there gives
        // p_j = 0 correctly), and lse = s_j - log p_j for the largest p_j.
        Expected e;
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 4; ++i) {
                std::vector<double> s(6), p(6);
                for (int j = 0; j < 6; ++j)
                    for (int d = 0; d < 4; ++d) s[static_cast<std::size_t>(j)] += double(q.at(0, h, i, d)) * k.at(0, h, j, d);
                std::size_t best = 0;
                for (std::size_t j = 0; j < 6; ++j) {
                    double denominator = 0.0;
                    for (std::size_t l = 0; l < 6; ++l) denominator += std::exp(s[l] - s[j]);
                    p[j] = 1.0 / denominator;
                    if (p[j] > p[best]) best = j;
                }
                e.weights.insert(e.weights.end(), p.begin(), p.end());
                e.lse.push_back(s[best] - std::log(p[best]));
                for (int d = 0; d < 3; ++d) {
                    double acc = 0.0;
                    for (int j = 0; j < 6; ++j) acc += p[static_cast<std::size_t>(j)] * v.at(0, h, j, d);
                    e.o.push_back(acc);
                }
            }
        for (float x : r.o) CHECK(std::isfinite(x));
        for (float x : r.lse) CHECK(std::isfinite(x));
        float largest = 0.0f;
        for (float x : r.lse) largest = std::max(largest, std::abs(x));
        CHECK(largest > 1000.0f);
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.weights, e.weights) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
    }
}

TEST_CASE("reference: fp16 inputs and outputs", "[reference]") {
    std::mt19937 rng(1009);
    const Shape qs{2, 2, 3, 8}, ks{2, 1, 5, 8}, vs{2, 1, 5, 8}, os{2, 2, 3, 8};
    Tensor t[3] = {random_tensor(rng, qs, -2, 2), random_tensor(rng, ks, -2, 2), random_tensor(rng, vs, -2, 2)};
    std::vector<std::uint16_t> half[3];
    for (int i = 0; i < 3; ++i)
        for (auto& x : t[i].data) {
            half[i].push_back(float_to_half(x));
            x = half_to_float(half[i].back());  // the fp32 run sees exactly the fp16 values
        }
    AttentionOptions opt;
    opt.causal = Causal::bottom_right;
    const auto f32 = run(t[0], t[1], t[2], {}, opt);

    std::vector<std::uint16_t> o(element_count(os));
    std::vector<float> weights(f32.weights.size()), lse(f32.lse.size());
    AttentionInputs in;
    in.q = make_view<const void*>(half[0].data(), DType::f16, Layout::bhnd, qs);
    in.k = make_view<const void*>(half[1].data(), DType::f16, Layout::bhnd, ks);
    in.v = make_view<const void*>(half[2].data(), DType::f16, Layout::bhnd, vs);
    reference_attention(in, {make_view<void*>(o.data(), DType::f16, Layout::bhnd, os), weights.data(), lse.data()}, opt);
    for (std::size_t i = 0; i < o.size(); ++i) CHECK(o[i] == float_to_half(f32.o[i]));
    CHECK(weights == f32.weights);
    CHECK(lse == f32.lse);
}


TEST_CASE("reference_stages agrees with reference_attention", "[reference]") {
    std::mt19937 rng(1010);
    const std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 5, Nkv = 6, Dk = 3, Dv = 5;
    const auto q = random_tensor(rng, {B, Hq, Nq, Dk}), k = random_tensor(rng, {B, Hkv, Nkv, Dk}),
               v = random_tensor(rng, {B, Hkv, Nkv, Dv});
    std::vector<std::uint8_t> bmask(static_cast<std::size_t>(B * Nq * Nkv));
    std::bernoulli_distribution coin(0.7);
    for (auto& m : bmask) m = coin(rng) ? 1 : 0;
    std::vector<float> fmask = random_tensor(rng, {1, 1, Nq, Nkv}).data;
    const std::vector<std::int32_t> lengths{6, 3};
    AttentionInputs extra;
    extra.kv_lengths = lengths;
    extra.bool_mask = MaskView{bmask.data(), {B, 1, Nq, Nkv}};
    extra.float_mask = MaskView{fmask.data(), {Nq, Nkv}};
    AttentionOptions opt;
    opt.causal = Causal::bottom_right;
    const auto r = run(q, k, v, extra, opt);

    const auto qd = store(q, dense_strides(Layout::bhnd, q.shape), element_count(q.shape));
    const auto kd = store(k, dense_strides(Layout::bhnd, k.shape), element_count(k.shape));
    const auto vd = store(v, dense_strides(Layout::bhnd, v.shape), element_count(v.shape));
    AttentionInputs in = extra;
    in.q = make_view<const void*>(qd.data(), DType::f32, Layout::bhnd, q.shape);
    in.k = make_view<const void*>(kd.data(), DType::f32, Layout::bhnd, k.shape);
    in.v = make_view<const void*>(vd.data(), DType::f32, Layout::bhnd, v.shape);
    const auto st = reference_stages(in, opt);
    const auto to_float = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    CHECK(to_float(st.output) == r.o);
    CHECK(to_float(st.weights) == r.weights);
    CHECK(to_float(st.lse) == r.lse);
    // The scores are the raw scale·Q·Kᵀ, masks not applied.
    std::vector<double> scores;
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t i = 0; i < Nq; ++i)
                for (std::int64_t j = 0; j < Nkv; ++j) {
                    double s = 0.0;
                    for (std::int64_t d = 0; d < Dk; ++d) s += double(q.at(b, h, i, d)) * k.at(b, h / 2, j, d);
                    scores.push_back(s / std::sqrt(3.0));
                }
    REQUIRE(st.scores.size() == scores.size());
    for (std::size_t i = 0; i < scores.size(); ++i) CHECK(st.scores[i] == Approx(scores[i]).epsilon(1e-12));

    const auto lean = reference_stages(in, opt, false);
    CHECK(lean.weights.empty());
    CHECK(lean.output == st.output);
    CHECK(lean.lse == st.lse);

    in.v.shape[2] = Nkv - 1;
    CHECK_THROWS_AS(reference_stages(in, opt), InvalidArgument);
}

TEST_CASE("reference_attention validates its arguments", "[reference]") {
    std::mt19937 rng(1011);
    const auto q = random_tensor(rng, {1, 2, 3, 4}), k = random_tensor(rng, {1, 2, 3, 4});
    std::vector<float> o(32);
    AttentionInputs in;
    in.q = make_view<const void*>(q.data.data(), DType::f32, Layout::bhnd, q.shape);
    in.k = make_view<const void*>(k.data.data(), DType::f32, Layout::bhnd, k.shape);
    in.v = in.k;
    AttentionOutputs out{make_view<void*>(o.data(), DType::f32, Layout::bhnd, {1, 2, 4, 4})};
    try {
        reference_attention(in, out);
        FAIL("a wrong output shape was accepted");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "o");
    }
}

// The CPU reference against hand-derived or independently computed expectations. The independent
// computation (naive() below) works on dense [B, H, N, D] arrays with a visibility predicate written
// out per test, and a softmax without the max subtraction: it shares no code with the reference.
#include "support/catch.hpp"
#include "support/element_count.hpp"

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

using namespace vkattn;
using Shape = std::array<std::int64_t, 4>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using test::element_count;

// A logical [B, H, N, D] tensor, dense in bhnd order.
struct Tensor {
    Shape shape;
    std::vector<float> data;
    float at(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) const {
        return data[static_cast<std::size_t>(((b * shape[1] + h) * shape[2] + n) * shape[3] + d)];
    }
};

Tensor random_tensor(std::mt19937& rng, const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    Tensor t{shape, std::vector<float>(element_count(shape))};
    for (auto& x : t.data) x = dist(rng);
    return t;
}

// The same logical data laid out through `strides` (a buffer of `size` elements).
std::vector<float> store(const Tensor& t, const Shape& strides, std::size_t size) {
    std::vector<float> out(size, std::numeric_limits<float>::quiet_NaN());  // padding is poison
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h)
            for (std::int64_t n = 0; n < t.shape[2]; ++n)
                for (std::int64_t d = 0; d < t.shape[3]; ++d)
                    out[static_cast<std::size_t>(b * strides[0] + h * strides[1] + n * strides[2] +
                                                 d)] = t.at(b, h, n, d);
    return out;
}

struct Result {
    std::vector<float> o, weights, lse;  // o dense bhnd
};

// Runs reference_attention with q, k, v and o stored in the given layouts; `extra` supplies the
// kv_lengths and masks.
Result run(const Tensor& q, const Tensor& k, const Tensor& v, AttentionInputs extra = {},
           const AttentionOptions& options = {}, Layout layout = Layout::bhnd) {
    const Tensor* in[] = {&q, &k, &v};
    std::vector<float> buffers[3];
    TensorView* views[] = {&extra.q, &extra.k, &extra.v};
    for (int t = 0; t < 3; ++t) {
        buffers[t] = store(*in[t], dense_strides(layout, in[t]->shape), element_count(in[t]->shape));
        *views[t] = make_view<const void*>(buffers[t].data(), DType::f32, layout, in[t]->shape);
    }
    const Shape o_shape{q.shape[0], q.shape[1], q.shape[2], v.shape[3]};
    std::vector<float> o(element_count(o_shape), std::numeric_limits<float>::quiet_NaN());
    Result r;
    r.weights.resize(element_count({q.shape[0], q.shape[1], q.shape[2], k.shape[2]}));
    r.lse.resize(element_count({q.shape[0], q.shape[1], q.shape[2], 1}));
    AttentionOutputs out{make_view<void*>(o.data(), DType::f32, layout, o_shape), r.weights.data(),
                         r.lse.data()};
    reference_attention(extra, out, options);
    r.o.resize(o.size());
    const auto s = out.o.strides;
    for (std::int64_t b = 0, at = 0; b < o_shape[0]; ++b)
        for (std::int64_t h = 0; h < o_shape[1]; ++h)
            for (std::int64_t n = 0; n < o_shape[2]; ++n)
                for (std::int64_t d = 0; d < o_shape[3]; ++d, ++at)
                    r.o[static_cast<std::size_t>(at)] =
                        o[static_cast<std::size_t>(b * s[0] + h * s[1] + n * s[2] + d)];
    return r;
}

using Predicate = std::function<bool(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>;
using Additive = std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>;

struct Expected {
    std::vector<double> o, weights, lse;
};

// Independent attention: direct exp without the max (inputs here are small), masked keys skipped;
// optional logit cap and per-head sink logits.
Expected naive(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
               const Predicate& visible, const Additive& additive = {}, double softcap = 0.0,
               const std::vector<double>& sinks = {}) {
    const auto [B, Hq, Nq, Dk] = q.shape;
    const std::int64_t Hkv = k.shape[1], Nkv = k.shape[2], Dv = v.shape[3];
    Expected e;
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t i = 0; i < Nq; ++i) {
                const std::int64_t kh = h * Hkv / Hq;
                std::vector<double> p(static_cast<std::size_t>(Nkv), 0.0);
                double sum = 0.0;
                for (std::int64_t j = 0; j < Nkv; ++j) {
                    if (!visible(b, h, i, j)) continue;
                    double s = 0.0;
                    for (std::int64_t d = 0; d < Dk; ++d) s += double(q.at(b, h, i, d)) * k.at(b, kh, j, d);
                    s *= scale;
                    if (softcap > 0.0) s = softcap * std::tanh(s / softcap);
                    s += additive ? additive(b, h, i, j) : 0.0;
                    p[static_cast<std::size_t>(j)] = std::exp(s);
                    sum += std::exp(s);
                }
                if (!sinks.empty()) sum += std::exp(sinks[static_cast<std::size_t>(h)]);
                for (auto& x : p) x = sum > 0 ? x / sum : 0.0;
                e.weights.insert(e.weights.end(), p.begin(), p.end());
                e.lse.push_back(sum > 0 ? std::log(sum) : -kInf);
                for (std::int64_t d = 0; d < Dv; ++d) {
                    double acc = 0.0;
                    for (std::int64_t j = 0; j < Nkv; ++j) acc += p[static_cast<std::size_t>(j)] * v.at(b, kh, j, d);
                    e.o.push_back(acc);
                }
            }
    return e;
}

// "" when got matches want within a relative tolerance (infinities must match exactly), otherwise a
// description of the first mismatch.
template <class T>
std::string mismatch(const std::vector<float>& got, const std::vector<T>& want, double tol = 1e-6) {
    if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = static_cast<double>(want[i]);
        const bool ok = std::isinf(w) ? g == w : std::abs(g - w) <= tol * (1.0 + std::abs(w));
        if (!ok) {
            std::ostringstream out;
            out << "element " << i << ": got " << g << ", want " << w;
            return out.str();
        }
    }
    return "";
}

bool any_nan(const std::vector<float>& x) {
    for (float f : x)
        if (std::isnan(f)) return true;
    return false;
}

}  // namespace

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

TEST_CASE("half: every bit pattern round-trips, NaNs stay NaN", "[reference][half]") {
    int failures = 0;
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
        const auto h = static_cast<std::uint16_t>(bits);
        const float f = half_to_float(h);
        const bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
        const std::uint16_t back = float_to_half(f);
        const bool ok = is_nan ? std::isnan(f) && (back & 0x7c00u) == 0x7c00u && (back & 0x3ffu) != 0 &&
                                     (back & 0x8000u) == (h & 0x8000u)
                               : back == h;
        if (!ok && ++failures <= 5) FAIL_CHECK("pattern " << bits << " -> " << f << " -> " << back);
    }
    CHECK(failures == 0);
    CHECK(half_to_float(0x3c00) == 1.0f);
    CHECK(half_to_float(0xc000) == -2.0f);
    CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
    CHECK(half_to_float(0x03ff) == std::ldexp(1023.0f, -24));
    CHECK(half_to_float(0x0400) == std::ldexp(1.0f, -14));
    CHECK(half_to_float(0x7bff) == 65504.0f);
    CHECK(half_to_float(0xfc00) == -INFINITY);
    CHECK(std::bit_cast<std::uint32_t>(half_to_float(0x8000)) == 0x80000000u);
}

TEST_CASE("half: float_to_half rounds to nearest even and overflows to infinity", "[reference][half]") {
    // Every midpoint between adjacent finite positive halves (exact in float) rounds to the even
    // neighbour; a hair either side rounds to the nearer one. Negative values mirror this.
    int failures = 0;
    for (std::uint16_t h = 0; h < 0x7bff; ++h) {
        const float lo = half_to_float(h), hi = half_to_float(static_cast<std::uint16_t>(h + 1));
        const float mid = (lo + hi) / 2;
        const std::uint16_t even = (h & 1u) ? static_cast<std::uint16_t>(h + 1) : h;
        const bool ok = float_to_half(mid) == even && float_to_half(-mid) == (even | 0x8000u) &&
                        float_to_half(std::nextafter(mid, 0.0f)) == h &&
                        float_to_half(std::nextafter(mid, INFINITY)) == h + 1;
        if (!ok && ++failures <= 5) FAIL_CHECK("between " << h << " and " << h + 1);
    }
    CHECK(failures == 0);
    CHECK(float_to_half(65504.0f) == 0x7bff);
    CHECK(float_to_half(65519.99f) == 0x7bff);
    CHECK(float_to_half(65520.0f) == 0x7c00);
    CHECK(float_to_half(-1e10f) == 0xfc00);
    CHECK(float_to_half(std::numeric_limits<float>::max()) == 0x7c00);
    CHECK(float_to_half(INFINITY) == 0x7c00);
    CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24: even is 0
    CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(float_to_half(std::ldexp(1.0f, -26)) == 0x0000);
    CHECK(float_to_half(-std::numeric_limits<float>::denorm_min()) == 0x8000);
    CHECK(float_to_half(std::ldexp(1023.5f, -24)) == 0x0400);  // subnormal rounds up to normal
    CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
    CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
    CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
    // A signalling NaN whose payload lies only in the low bits must not become infinity.
    CHECK(std::isnan(half_to_float(float_to_half(std::bit_cast<float>(0x7f800001u)))));
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

TEST_CASE("reference: sliding window around an explicit causal offset", "[reference][features]") {
    std::mt19937 rng(2001);
    const auto q = random_tensor(rng, {2, 2, 6, 4}), k = random_tensor(rng, {2, 2, 9, 4}),
               v = random_tensor(rng, {2, 2, 9, 3});
    const std::int64_t offset = 2, left = 3, right = 1;  // causal cuts the right side to 0
    const AttentionOptions options{.causal_offset = offset, .window = {left, right}};
    const Result r = run(q, k, v, {}, options);
    const Expected e = naive(q, k, v, 0.5, [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
        return j <= i + offset && j >= i + offset - left;
    });
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
    CHECK(mismatch(r.lse, e.lse) == "");
}

TEST_CASE("reference: a window without causal and one that empties rows", "[reference][features]") {
    std::mt19937 rng(2002);
    const auto q = random_tensor(rng, {1, 1, 7, 4}), k = random_tensor(rng, {1, 1, 7, 4}),
               v = random_tensor(rng, {1, 1, 7, 3});
    SECTION("symmetric window (2, 2), top-left") {
        const Result r = run(q, k, v, {}, {.window = {2, 2}});
        const Expected e = naive(q, k, v, 0.5, [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
            return j >= i - 2 && j <= i + 2;
        });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
    }
    SECTION("offset -3: the first three rows see nothing and give zeros") {
        const Result r = run(q, k, v, {}, {.causal_offset = -3});
        const Expected e = naive(q, k, v, 0.5, [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
            return j <= i - 3;
        });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
        CHECK(r.lse[0] == -kInf);
        CHECK(r.o[0] == 0.0f);
        CHECK_FALSE(any_nan(r.o));
    }
}

TEST_CASE("reference: ALiBi slopes from max_bias are the geometric sequence", "[reference][features]") {
    // Hq = 4 (a power of two): slope_h = 2^(-8 (h + 1) / 4).
    const std::vector<float> four = alibi_slopes(4, 8.0);
    REQUIRE(four.size() == 4);
    CHECK(four[0] == 0.25f);
    CHECK(four[3] == 1.0f / 256.0f);
    // Hq = 12: n2 = 8, m0 = 2^-1, m1 = 2^-0.5; heads 8.. take the odd powers of m1.
    const std::vector<float> twelve = alibi_slopes(12, 8.0);
    CHECK(twelve[7] == 1.0f / 256.0f);
    CHECK(twelve[8] == Approx(std::exp2(-0.5)));
    CHECK(twelve[9] == Approx(std::exp2(-1.5)));
    CHECK(twelve[11] == Approx(std::exp2(-3.5)));

    std::mt19937 rng(2003);
    const auto q = random_tensor(rng, {1, 4, 5, 4}), k = random_tensor(rng, {1, 4, 8, 4}),
               v = random_tensor(rng, {1, 4, 8, 3});
    const Result r = run(q, k, v, {}, {.causal = Causal::bottom_right, .alibi_max_bias = 8.0});
    const std::int64_t a = 8 - 5;  // bottom-right alignment
    const Expected e = naive(
        q, k, v, 0.5, [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return j <= i + a; },
        [&](std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
            return -std::exp2(-2.0 * static_cast<double>(h + 1)) * static_cast<double>(std::abs(i + a - j));
        });
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
}

TEST_CASE("reference: softcap applies before the masks and sinks join only the denominator",
          "[reference][features]") {
    std::mt19937 rng(2004);
    const auto q = random_tensor(rng, {1, 2, 4, 4}, -4.0f, 4.0f), k = random_tensor(rng, {1, 2, 6, 4}, -4.0f, 4.0f),
               v = random_tensor(rng, {1, 2, 6, 3});
    const std::vector<float> sinks{1.5f, -0.5f};
    std::vector<float> bias(24);
    for (std::size_t x = 0; x < bias.size(); ++x) bias[x] = x % 5 == 0 ? -std::numeric_limits<float>::infinity() : 0.1f * static_cast<float>(x % 7);
    AttentionInputs extra;
    extra.sinks = sinks;
    extra.float_mask = MaskView{bias.data(), {4, 6}};
    const Result r = run(q, k, v, extra, {.causal = Causal::top_left, .softcap = 1.5});
    const Expected e = naive(
        q, k, v, 0.5, [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return j <= i; },
        [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return double(bias[static_cast<std::size_t>(i * 6 + j)]); },
        1.5, {1.5, -0.5});
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
    CHECK(mismatch(r.lse, e.lse) == "");
    // Row 0 of each head: its only causal key (j = 0) has bias -inf, so the sink is all there is.
    CHECK(r.lse[0] == Approx(1.5));
    CHECK(r.lse[4] == Approx(-0.5));
    CHECK(r.o[0] == 0.0f);
}

TEST_CASE("reference: dropout zeroes exactly the Philox-chosen weights and rescales the rest",
          "[reference][features][dropout]") {
    std::mt19937 rng(2005);
    const auto q = random_tensor(rng, {2, 2, 5, 4}), k = random_tensor(rng, {2, 2, 11, 4}),
               v = random_tensor(rng, {2, 2, 11, 3});
    const Result plain = run(q, k, v);
    const double p = 0.4;
    const std::uint64_t seed = 99;
    const Result dropped = run(q, k, v, {}, {.dropout = p, .seed = seed});
    const std::uint32_t threshold = dropout_threshold(p);
    std::size_t x = 0;
    for (std::uint32_t b = 0; b < 2; ++b)
        for (std::uint32_t h = 0; h < 2; ++h)
            for (std::uint32_t i = 0; i < 5; ++i)
                for (std::uint32_t j = 0; j < 11; ++j, ++x) {
                    const double want = dropout_keeps(seed, threshold, b, h, i, j) ? plain.weights[x] / (1.0 - p) : 0.0;
                    CHECK(dropped.weights[x] == Approx(want).epsilon(1e-6));
                }
    CHECK(mismatch(dropped.lse, plain.lse) == "");
}

TEST_CASE("Philox 4x32-10 matches the Random123 known-answer vectors", "[reference][dropout]") {
    CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == PhiloxBlock{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
    CHECK(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}) == PhiloxBlock{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
    CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
          PhiloxBlock{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
    CHECK(dropout_threshold(0.0) == 0u);
    CHECK(dropout_threshold(0.5) == 0x80000000u);
    CHECK(dropout_threshold(0.9999999999999) == 0xFFFFFFFFu);
}

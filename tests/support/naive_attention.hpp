// The CPU reference's unit tests' independent side (tests/unit/test_reference.cpp,
// test_reference_features.cpp): dense [B, H, N, D] tensors, the reference run through any layout,
// and naive(), attention computed with a visibility predicate written out per test and a softmax
// without the max subtraction, sharing no code with the reference; mismatch() names the first
// element out of tolerance.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/element_count.hpp"
#include "vkattn/reference.hpp"

namespace vkattn::test {

using Shape = std::array<std::int64_t, 4>;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// A logical [B, H, N, D] tensor, dense in bhnd order.
struct Tensor {
    Shape shape;
    std::vector<float> data;
    float at(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) const {
        return data[static_cast<std::size_t>(((b * shape[1] + h) * shape[2] + n) * shape[3] + d)];
    }
};

inline Tensor random_tensor(std::mt19937& rng, const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    Tensor t{shape, std::vector<float>(element_count(shape))};
    for (auto& x : t.data) x = dist(rng);
    return t;
}

// The same logical data laid out through `strides` (a buffer of `size` elements).
inline std::vector<float> store(const Tensor& t, const Shape& strides, std::size_t size) {
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
inline Result run(const Tensor& q, const Tensor& k, const Tensor& v, AttentionInputs extra = {},
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
inline Expected naive(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
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
inline std::string mismatch(const std::vector<float>& got, const std::vector<T>& want, double tol = 1e-6) {
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

inline bool any_nan(const std::vector<float>& x) {
    for (float f : x)
        if (std::isnan(f)) return true;
    return false;
}

}  // namespace vkattn::test

// The CPU reference of the backward pass, one query row at a time, everything in double. With the
// forward's definitions (reference.cpp, Problem::logit):
//   s_j = scale·q·k_j                    the scaled score
//   x_j = softcap(s_j) + terms_j         the logit (−∞ where masked)
//   p_j = exp(x_j − lse),  lse = log(e^sink + Σ_j e^(x_j))
//   w_j = p_j · keep_j / (1 − dropout)   the weight that multiplies V (w = p without dropout)
//   o   = Σ_j w_j v_j
// the gradients of a loss L given dO = ∂L/∂o are
//   dv_j += w_j · dO                     (summed over the query heads that share the K/V head)
//   dp_j  = (dO · v_j) · keep_j / (1 − dropout)
//   Δ     = Σ_j p_j dp_j                 (= rowsum(dO ∘ o), FlashAttention-2's D)
//   dx_j  = p_j (dp_j − Δ)               the softmax's backward; the sink has no dp, so
//   dsink = −e^(sink − lse) · Δ          its weight's share of Δ, with the opposite sign
//   dmask = dx_j                          summed into the float mask's own element (broadcast)
//   ds_j  = dx_j · (1 − tanh²(s_j / c))  through the softcap (dx_j without one)
//   dq   += scale · ds_j · k_j,  dk_j += scale · ds_j · q
// A row without a visible key (and no sink) has p = 0 everywhere: it contributes nothing.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/problem.hpp"
#include "reference/tensor_access.hpp"
#include "vkattn/reference.hpp"

namespace vkattn {
namespace {

using detail::DenseRows;
using detail::dense_rows;
using detail::load;
using detail::Problem;
using detail::store;

using detail::kNegInf;

// A dense double accumulator shaped like a [B, H, N, D] tensor, stored through a view at the end.
struct Accumulator {
    std::array<std::int64_t, 4> shape{};
    std::vector<double> values;
    explicit Accumulator(const std::array<std::int64_t, 4>& s)
        : shape(s), values(static_cast<std::size_t>(s[0] * s[1] * s[2] * s[3]), 0.0) {}
    double& at(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) {
        return values[static_cast<std::size_t>(((b * shape[1] + h) * shape[2] + n) * shape[3] + d)];
    }
    void store_into(const MutableTensorView& view) {
        if (view.data == nullptr) return;
        for (std::int64_t b = 0; b < shape[0]; ++b)
            for (std::int64_t h = 0; h < shape[1]; ++h)
                for (std::int64_t n = 0; n < shape[2]; ++n)
                    for (std::int64_t d = 0; d < shape[3]; ++d) store(view, b, h, n, d, at(b, h, n, d));
    }
};

}  // namespace

void reference_attention_backward(const AttentionInputs& in, const TensorView& grad_out,
                                  const AttentionGradients& grads, const AttentionOptions& options) {
    const Problem p = detail::resolve_backward(in, grad_out, grads, options);
    Accumulator dq({p.B, p.Hq, p.Nq, p.Dk}), dk({p.B, p.Hkv, p.Nkv, p.Dk}), dv({p.B, p.Hkv, p.Nkv, p.Dv});
    std::vector<double> d_sinks(p.sinks.size(), 0.0);
    std::vector<double> d_mask(static_cast<std::size_t>(grads.d_float_mask != nullptr ? p.float_mask.elements : 0), 0.0);
    const auto nkv = static_cast<std::size_t>(p.Nkv);
    std::vector<double> s(nkv), x(nkv), prob(nkv), dp(nkv), d_o(static_cast<std::size_t>(p.Dv));
    std::vector<double> q_row(static_cast<std::size_t>(p.Dk));
    const DenseRows k = dense_rows(in.k, p.k_scale), v = dense_rows(in.v, p.v_scale);

    for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t h = 0; h < p.Hq; ++h)
            for (std::int64_t i = 0; i < p.Nq; ++i) {
                const std::int64_t kh = p.kv_head(h);
                // The forward, recomputed: scores, logits, log-sum-exp (the sink joins the max and
                // the denominator only), probabilities.
                const double sink = p.sink(h);
                double m = sink;
                for (std::int64_t d = 0; d < p.Dk; ++d) q_row[static_cast<std::size_t>(d)] = load(in.q, b, h, i, d);
                for (std::int64_t j = 0; j < p.Nkv; ++j) {
                    const auto jj = static_cast<std::size_t>(j);
                    const float* key = k.row(b, kh, j);
                    double dot = 0.0;
                    for (std::int64_t d = 0; d < p.Dk; ++d) dot += q_row[static_cast<std::size_t>(d)] * key[d];
                    s[jj] = p.scale * dot;
                    x[jj] = p.logit(b, h, i, j, s[jj]);
                    if (std::isnan(x[jj]) || x[jj] > m) m = std::isnan(m) ? m : x[jj];
                }
                if (m == kNegInf) continue;  // nothing visible and no sink: no gradient flows
                double sum = std::exp(sink - m);
                for (std::size_t j = 0; j < nkv; ++j) sum += std::exp(x[j] - m);
                const double lse = m + std::log(sum);

                for (std::int64_t e = 0; e < p.Dv; ++e) d_o[static_cast<std::size_t>(e)] = load(grad_out, b, h, i, e);
                double delta = 0.0;
                for (std::int64_t j = 0; j < p.Nkv; ++j) {
                    const auto jj = static_cast<std::size_t>(j);
                    prob[jj] = std::exp(x[jj] - lse);  // 0 where masked
                    dp[jj] = 0.0;
                    if (prob[jj] == 0.0) continue;
                    // Dropout: the kept weights are rescaled, the dropped ones pass no gradient.
                    const double keep = p.drop_threshold == 0 ? 1.0 : p.kept(b, h, i, j) ? p.keep_scale() : 0.0;
                    if (keep == 0.0) continue;
                    const float* value = v.row(b, kh, j);
                    double dw = 0.0;
                    for (std::int64_t e = 0; e < p.Dv; ++e) {
                        const double g = d_o[static_cast<std::size_t>(e)];
                        dw += g * value[e];
                        dv.at(b, kh, j, e) += prob[jj] * keep * g;
                    }
                    dp[jj] = dw * keep;
                    delta += prob[jj] * dp[jj];
                }
                if (!d_sinks.empty()) d_sinks[static_cast<std::size_t>(h)] -= std::exp(sink - lse) * delta;

                for (std::int64_t j = 0; j < p.Nkv; ++j) {
                    const auto jj = static_cast<std::size_t>(j);
                    if (prob[jj] == 0.0) continue;
                    const double dx = prob[jj] * (dp[jj] - delta);
                    if (!d_mask.empty()) d_mask[static_cast<std::size_t>(p.float_mask.offset(b, h, i, j))] += dx;
                    double ds = dx;
                    if (p.softcap > 0.0) {
                        const double t = std::tanh(s[jj] / p.softcap);
                        ds *= 1.0 - t * t;
                    }
                    const float* key = k.row(b, kh, j);
                    for (std::int64_t d = 0; d < p.Dk; ++d) {
                        dq.at(b, h, i, d) += p.scale * ds * key[d];
                        dk.at(b, kh, j, d) += p.scale * ds * q_row[static_cast<std::size_t>(d)];
                    }
                }
            }

    dq.store_into(grads.dq);
    dk.store_into(grads.dk);
    dv.store_into(grads.dv);
    if (grads.d_sinks != nullptr)
        for (std::size_t h = 0; h < d_sinks.size(); ++h) grads.d_sinks[h] = static_cast<float>(d_sinks[h]);
    for (std::size_t e = 0; e < d_mask.size(); ++e) grads.d_float_mask[e] = static_cast<float>(d_mask[e]);
}

}  // namespace vkattn

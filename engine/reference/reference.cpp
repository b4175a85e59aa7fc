// The CPU reference, one query row at a time, in the GPU's three stages:
//   1. scores:          S[j] = scale · Σ_d Q[i, d] · K[j, d]
//   2. masked softmax:  logit[j] = softcap(S[j]) + additive terms, -inf where masked;
//                       P[j] = exp(logit[j] - m) / (e^(sink - m) + Σ exp(logit - m)), then dropout;
//                       lse = log(e^sink + Σ exp(logit))
//   3. weighted sum:    O[:] = Σ_j P[j] · V[j, :]
// Everything is accumulated in double; rounding happens only when results are stored.
#include "vkattn/reference.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/problem.hpp"
#include "reference/tensor_access.hpp"
#include "vkattn/quantize.hpp"

namespace vkattn {
namespace {

using detail::DenseRows;
using detail::dense_rows;
using detail::load;
using detail::Problem;
using detail::store;

using detail::kNegInf;

// One query row: batch b, query head h, query position i.
struct Row {
    std::int64_t b, h, i;
};

// Stage 1: the unmasked scaled scores of one row, scores[j] for j in [0, Nkv).
void scores_row(const Problem& p, const AttentionInputs& in, const DenseRows& k, Row r, std::vector<double>& q_row,
                std::vector<double>& scores) {
    const std::int64_t kh = p.kv_head(r.h);
    for (std::int64_t d = 0; d < p.Dk; ++d) q_row[static_cast<std::size_t>(d)] = load(in.q, r.b, r.h, r.i, d);
    for (std::int64_t j = 0; j < p.Nkv; ++j) {
        const float* key = k.row(r.b, kh, j);
        double dot = 0.0;
        for (std::int64_t d = 0; d < p.Dk; ++d) dot += q_row[static_cast<std::size_t>(d)] * key[d];
        scores[static_cast<std::size_t>(j)] = p.scale * dot;
    }
}

// Stage 2: the masked softmax of one row; writes weights[j] and returns the log-sum-exp.
double softmax_row(const Problem& p, Row r, const std::vector<double>& scores,
                   std::vector<double>& weights) {
    // Logits (Problem::logit: softcap, additive terms, -inf where masked). The sink logit joins
    // the maximum and the denominator, never the weights.
    const double sink = p.sink(r.h);
    double m = sink;
    for (std::int64_t j = 0; j < p.Nkv; ++j) {
        const auto jj = static_cast<std::size_t>(j);
        weights[jj] = p.logit(r.b, r.h, r.i, j, scores[jj]);
        // A NaN logit makes the maximum NaN, and with it the whole row (as the GPU's sums do).
        if (std::isnan(weights[jj]) || weights[jj] > m) m = std::isnan(m) ? m : weights[jj];
    }
    // Fully masked row guard: every logit is -inf (no visible key, or an additive -inf on each)
    // and there is no sink. Subtracting m would compute -inf - (-inf) = NaN; the defined result is
    // instead weights 0, output 0 and lse -inf.
    if (m == kNegInf) {
        for (auto& w : weights) w = 0.0;
        return kNegInf;
    }
    // Subtracting the row max keeps every exponent <= 0, so huge logits cannot overflow, and the
    // max itself contributes exp(0) = 1, so the sum is >= 1 and the log is finite.
    double sum = std::exp(sink - m);  // 0 without a sink
    for (auto& w : weights) {
        w = std::exp(w - m);  // exp(-inf) = 0 for masked keys
        sum += w;
    }
    for (auto& w : weights) w /= sum;
    // Dropout after normalisation: the log-sum-exp is that of the softmax, the weights are the
    // ones that multiply V.
    if (p.drop_threshold != 0)
        for (std::int64_t j = 0; j < p.Nkv; ++j) {
            auto& w = weights[static_cast<std::size_t>(j)];
            w = p.kept(r.b, r.h, r.i, j) ? w * p.keep_scale() : 0.0;
        }
    return m + std::log(sum);
}

// Stage 3: one row of the output, out[e] = Σ_j weights[j] · V[j, e], each sum over j in order.
void weighted_sum_row(const Problem& p, const DenseRows& v, Row r, const std::vector<double>& weights,
                      std::vector<double>& out) {
    const std::int64_t kh = p.kv_head(r.h);
    std::fill(out.begin(), out.end(), 0.0);
    for (std::int64_t j = 0; j < p.Nkv; ++j) {
        const double w = weights[static_cast<std::size_t>(j)];
        if (w == 0.0) continue;  // skip masked keys (0·inf, 0·NaN)
        const float* value = v.row(r.b, kh, j);
        for (std::int64_t e = 0; e < p.Dv; ++e) out[static_cast<std::size_t>(e)] += w * value[e];
    }
}

// Runs the three stages on every row in [B, Hq, Nq] order and hands each row's results to `sink`
// as sink(row_index, row, scores, weights, lse, out).
template <class Sink>
void for_each_row(const Problem& p, const AttentionInputs& inputs, Sink&& sink) {
    const DenseRows k = dense_rows(inputs.k, p.k_scale), v = dense_rows(inputs.v, p.v_scale);
    std::vector<double> q_row(static_cast<std::size_t>(p.Dk));
    std::vector<double> scores(static_cast<std::size_t>(p.Nkv));
    std::vector<double> weights(static_cast<std::size_t>(p.Nkv));
    std::vector<double> out(static_cast<std::size_t>(p.Dv));
    std::int64_t index = 0;
    for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t h = 0; h < p.Hq; ++h)
            for (std::int64_t i = 0; i < p.Nq; ++i, ++index) {
                const Row r{b, h, i};
                scores_row(p, inputs, k, r, q_row, scores);
                const double lse = softmax_row(p, r, scores, weights);
                weighted_sum_row(p, v, r, weights, out);
                sink(index, r, scores, weights, lse, out);
            }
}

// Copies a row into a dense [rows, n] array at row `index`.
void put_row(std::vector<double>& dst, std::int64_t index, const std::vector<double>& src) {
    std::copy(src.begin(), src.end(), dst.begin() + index * static_cast<std::int64_t>(src.size()));
}

}  // namespace

void reference_attention(const AttentionInputs& inputs, const AttentionOutputs& outputs,
                         const AttentionOptions& options) {
    const Problem p = detail::resolve(inputs, outputs, options);
    // o goes through its view's strides and dtype; weights and logits [rows, Nkv] and lse [rows] are
    // dense fp32.
    for_each_row(p, inputs, [&](std::int64_t index, Row r, const std::vector<double>& scores,
                                const std::vector<double>& weights, double lse,
                                const std::vector<double>& out) {
        for (std::int64_t e = 0; e < p.Dv; ++e)
            store(outputs.o, r.b, r.h, r.i, e, out[static_cast<std::size_t>(e)]);
        if (outputs.weights != nullptr) {
            float* dst = outputs.weights + index * p.Nkv;
            for (std::int64_t j = 0; j < p.Nkv; ++j)
                dst[j] = static_cast<float>(weights[static_cast<std::size_t>(j)]);
        }
        if (outputs.lse != nullptr) outputs.lse[index] = static_cast<float>(lse);
        if (outputs.logits != nullptr) {
            float* dst = outputs.logits + index * p.Nkv;
            for (std::int64_t j = 0; j < p.Nkv; ++j)
                dst[j] = static_cast<float>(p.logit_at(p.logits_stage, r.b, r.h, r.i, j, scores[static_cast<std::size_t>(j)]));
        }
    });
}

ReferenceStages reference_stages(const AttentionInputs& inputs, const AttentionOptions& options,
                                 bool with_weights) {
    // resolve() validates an output too; this one is never written (only its shape is checked).
    std::uint32_t unused = 0;
    const std::array<std::int64_t, 4> o_shape{inputs.q.shape[0], inputs.q.shape[1],
                                              inputs.q.shape[2], inputs.v.shape[3]};
    AttentionOutputs dummy;
    dummy.o = make_view(static_cast<void*>(&unused), inputs.q.dtype, Layout::bhnd, o_shape);
    const Problem p = detail::resolve(inputs, dummy, options);

    const auto rows = static_cast<std::size_t>(p.B * p.Hq * p.Nq);
    const auto nkv = static_cast<std::size_t>(p.Nkv);
    ReferenceStages st;
    st.scores.resize(rows * nkv);
    if (with_weights) st.weights.resize(rows * nkv);
    st.lse.resize(rows);
    st.output.resize(rows * static_cast<std::size_t>(p.Dv));
    for_each_row(p, inputs, [&](std::int64_t index, Row, const std::vector<double>& scores,
                                const std::vector<double>& weights, double lse,
                                const std::vector<double>& out) {
        put_row(st.scores, index, scores);
        if (with_weights) put_row(st.weights, index, weights);
        st.lse[static_cast<std::size_t>(index)] = lse;
        put_row(st.output, index, out);
    });
    return st;
}

}  // namespace vkattn

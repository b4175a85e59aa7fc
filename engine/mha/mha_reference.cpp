// The whole multi-head layer on the CPU: projections in double, vkattn's reference attention on
// the head views (the same views and masks the GPU pass builds), the output projection in double;
// and its backward, with vkattn's reference attention backward for the core.
#include <cstring>

#include "mha/mha_problem.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/mha.hpp"
#include "vkattn/reference.hpp"

namespace vkattn {
namespace {

// What the device stores: fp32 as is, fp16 and bf16 rounded (the GPU reads rounded inputs and weights).
float stored(float x, DType dtype) {
    if (dtype == DType::f16) return half_to_float(float_to_half(x));
    if (dtype == DType::bf16) return bf16_to_float(float_to_bf16(x));
    return x;
}

// Y[rows, out] = X[rows, in]·Wᵀ + b, accumulated in double, stored as the device would store it.
std::vector<float> linear(const float* x, std::int64_t rows, std::int64_t in, const std::vector<float>& w,
                          const std::vector<float>& b, std::int64_t out, DType dtype) {
    std::vector<float> y(static_cast<std::size_t>(rows * out));
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < out; ++c) {
            double acc = b.empty() ? 0.0 : static_cast<double>(b[static_cast<std::size_t>(c)]);
            for (std::int64_t i = 0; i < in; ++i)
                acc += static_cast<double>(stored(x[r * in + i], dtype)) *
                       static_cast<double>(stored(w[static_cast<std::size_t>(c * in + i)], dtype));
            y[static_cast<std::size_t>(r * out + c)] = stored(static_cast<float>(acc), dtype);
        }
    return y;
}

// Each element of `values` as the device stores it.
std::vector<float> stored_all(std::vector<float> values, DType dtype) {
    for (float& x : values) x = stored(x, dtype);
    return values;
}

// C[m, n] = Σ_k A(m, k)·B(k, n) in double, A and B given as element functions.
template <class A, class B>
std::vector<float> product(std::int64_t m, std::int64_t n, std::int64_t k, A a, B b) {
    std::vector<float> c(static_cast<std::size_t>(m * n));
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (std::int64_t t = 0; t < k; ++t) acc += static_cast<double>(a(i, t)) * static_cast<double>(b(t, j));
            c[static_cast<std::size_t>(i * n + j)] = static_cast<float>(acc);
        }
    return c;
}

}  // namespace

void reference_multi_head_attention(const MultiHeadAttention& layer, const MhaInputs& inputs, const MhaOutputs& outputs,
                                    const MhaOptions& options) {
    using P = MultiHeadAttention;
    const detail::MhaProblem mp = detail::resolve_mha(layer.config(), inputs, outputs, options);
    const DType dtype = options.dtype;
    const std::vector<float> q = linear(mp.query, mp.query_rows(), mp.E, layer.weight(P::q), layer.bias(P::q), mp.E, dtype);
    const std::vector<float> k = linear(mp.key, mp.key_rows(), mp.kdim, layer.weight(P::k), layer.bias(P::k), mp.E, dtype);
    const std::vector<float> v = linear(mp.value, mp.key_rows(), mp.vdim, layer.weight(P::v), layer.bias(P::v), mp.E, dtype);

    // The core in fp32 on the head views (the fp16 case's rounding is already in q, k, v).
    std::vector<float> o(q.size());
    std::vector<float> per_head(mp.want_weights ? static_cast<std::size_t>(mp.N * mp.H * mp.L * mp.S) : 0);
    const AttentionInputs core_in = mp.core_inputs(q.data(), k.data(), v.data(), DType::f32);
    const AttentionOutputs core_out{.o = mp.mutable_heads(o.data(), DType::f32, mp.L),
                                    .weights = mp.want_weights ? per_head.data() : nullptr};
    reference_attention(core_in, core_out, mp.core_options(options));
    if (dtype != DType::f32)
        for (auto& x : o) x = stored(x, dtype);

    const std::vector<float> out = linear(o.data(), mp.query_rows(), mp.E, layer.weight(P::o), layer.bias(P::o), mp.E, dtype);
    std::memcpy(outputs.out, out.data(), out.size() * 4);
    if (mp.want_weights) detail::store_mha_weights(mp, per_head, outputs.attn_weights);
}

}  // namespace vkattn

namespace vkattn {

MhaGradients reference_multi_head_attention_backward(const MultiHeadAttention& layer, const MhaInputs& inputs,
                                                     const HostArray& grad_out, const MhaOptions& options) {
    using P = MultiHeadAttention;
    float placeholder = 0.0f;
    const detail::MhaProblem mp = detail::resolve_mha(layer.config(), inputs, MhaOutputs{.out = &placeholder}, options);
    detail::check_mha_grad_out(mp, inputs, grad_out);
    const DType dtype = options.dtype;
    const std::int64_t E = mp.E, rows[3] = {mp.query_rows(), mp.key_rows(), mp.key_rows()},
                       features[3] = {E, mp.kdim, mp.vdim};
    const float* x[3] = {mp.query, mp.key, mp.value};
    std::vector<float> projected[3];
    for (int i = 0; i < 3; ++i)
        projected[i] = linear(x[i], rows[i], features[i], layer.weight(i), layer.bias(i), E, dtype);

    // The forward's o, as the device stores it.
    const AttentionInputs core_in = mp.core_inputs(projected[0].data(), projected[1].data(), projected[2].data(), DType::f32);
    const AttentionOptions core_options = mp.core_options(options);
    std::vector<float> o(projected[0].size());
    reference_attention(core_in, {.o = mp.mutable_heads(o.data(), DType::f32, mp.L)}, core_options);
    o = stored_all(std::move(o), dtype);

    // The output projection's gradients and dO = dY·W_o.
    const std::int64_t qr = mp.query_rows();
    const std::vector<float> dy = stored_all({grad_out.data, grad_out.data + qr * E}, dtype);
    const std::vector<float> w_o = stored_all(layer.weight(P::o), dtype);
    auto at = [](const std::vector<float>& m, std::int64_t cols) {
        return [&m, cols](std::int64_t r, std::int64_t c) { return m[static_cast<std::size_t>(r * cols + c)]; };
    };
    auto transposed = [](const std::vector<float>& m, std::int64_t cols) {
        return [&m, cols](std::int64_t r, std::int64_t c) { return m[static_cast<std::size_t>(c * cols + r)]; };
    };
    auto one = [](std::int64_t, std::int64_t) { return 1.0f; };
    std::vector<float> dw[4], db[4];
    dw[P::o] = product(E, E, qr, transposed(dy, E), at(o, E));
    if (layer.config().bias) db[P::o] = product(1, E, qr, one, at(dy, E));
    const std::vector<float> d_o = stored_all(product(qr, E, E, at(dy, E), at(w_o, E)), dtype);

    // The core's gradients, stored as the device stores them.
    std::vector<float> grads[3];
    for (int i = 0; i < 3; ++i) grads[i].resize(static_cast<std::size_t>(rows[i] * E));
    const std::int64_t lengths[3] = {mp.L, mp.S, mp.S};
    reference_attention_backward(core_in, mp.heads(d_o.data(), DType::f32, mp.L),
                                 {.dq = mp.mutable_heads(grads[0].data(), DType::f32, lengths[0]),
                                  .dk = mp.mutable_heads(grads[1].data(), DType::f32, lengths[1]),
                                  .dv = mp.mutable_heads(grads[2].data(), DType::f32, lengths[2])},
                                 core_options);

    // The input projections' gradients; an input used twice collects both.
    MhaGradients g;
    std::vector<float>* dx[3] = {&g.query, &g.key, &g.value};
    for (int i = 0; i < 3; ++i) {
        const std::vector<float> d = stored_all(std::move(grads[i]), dtype);
        const std::vector<float> xi = stored_all({x[i], x[i] + rows[i] * features[i]}, dtype);
        const std::vector<float> wi = stored_all(layer.weight(i), dtype);
        dw[i] = product(E, features[i], rows[i], transposed(d, E), at(xi, features[i]));
        if (layer.config().bias) db[i] = product(1, E, rows[i], one, at(d, E));
        const std::vector<float> dxi = product(rows[i], features[i], E, at(d, E), at(wi, features[i]));
        const int target = mp.same_as(i);
        if (dx[target]->empty()) *dx[target] = dxi;
        else
            for (std::size_t e = 0; e < dxi.size(); ++e) (*dx[target])[e] += dxi[e];
    }
    g.parameters = detail::named_parameters(mp, layer.config().bias, dw, db);
    return g;
}

}  // namespace vkattn

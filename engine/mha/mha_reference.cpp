// The whole multi-head layer on the CPU: projections in double, vkattn's reference attention on
// the head views (the same views and masks the GPU pass builds), the output projection in double.
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

// The reference backward's unit tests' problem (tests/unit/test_reference_backward.cpp,
// test_reference_backward_fixtures.cpp): a case's settings, its random data as dense float buffers in
// its layout, the loss Σ grad_out · o that finite differences take, and the reference's gradients.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/element_count.hpp"
#include "vkattn/reference.hpp"

namespace vkattn::backward_test {

using Shape = std::array<std::int64_t, 4>;
using test::element_count;

inline constexpr float kInfinity = std::numeric_limits<float>::infinity();

// One backward problem: its settings, and its data as dense float buffers in `layout`.
struct Case {
    std::string name;
    std::int64_t B = 2, Hq = 2, Hkv = 2, Nq = 5, Nkv = 7, Dk = 6, Dv = 6;
    AttentionOptions options;
    std::vector<std::int32_t> kv_lengths;
    std::optional<std::vector<std::int64_t>> bool_mask, float_mask;  // shapes
    bool alibi = false, sinks = false;
    Layout layout = Layout::bhnd;
    float spread = 1.0f;
};

struct Data {
    Case c;
    Shape q_shape, k_shape, v_shape, o_shape;
    std::vector<float> q, k, v, grad_out, float_mask, sinks, slopes;
    std::vector<std::uint8_t> bool_mask;

    explicit Data(const Case& cs, std::uint32_t seed) : c(cs) {
        q_shape = {c.B, c.Hq, c.Nq, c.Dk};
        k_shape = {c.B, c.Hkv, c.Nkv, c.Dk};
        v_shape = {c.B, c.Hkv, c.Nkv, c.Dv};
        o_shape = {c.B, c.Hq, c.Nq, c.Dv};
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> dist(-c.spread, c.spread), unit(-1.0f, 1.0f);
        for (auto [vec, shape] : {std::pair{&q, q_shape}, std::pair{&k, k_shape}, std::pair{&v, v_shape}}) {
            vec->resize(element_count(shape));
            for (auto& x : *vec) x = dist(rng);
        }
        grad_out.resize(element_count(o_shape));
        for (auto& x : grad_out) x = unit(rng);
        if (c.bool_mask) {
            bool_mask.resize(element_count(*c.bool_mask));
            for (auto& m : bool_mask) m = unit(rng) < 0.5f ? 1 : 0;  // 3 in 4 attend
        }
        if (c.float_mask) {
            float_mask.resize(element_count(*c.float_mask));
            for (auto& x : float_mask) x = unit(rng);
            float_mask[1] = -kInfinity;  // a blocked entry: no gradient reaches it
        }
        if (c.sinks) {
            sinks.resize(static_cast<std::size_t>(c.Hq));
            for (auto& x : sinks) x = unit(rng);
            sinks[0] = -kInfinity;  // a head without a sink
        }
        if (c.alibi) slopes = alibi_slopes(c.Hq, 8.0);
    }

    AttentionInputs inputs() const {
        AttentionInputs in;
        in.q = make_view<const void*>(q.data(), DType::f32, c.layout, q_shape);
        in.k = make_view<const void*>(k.data(), DType::f32, c.layout, k_shape);
        in.v = make_view<const void*>(v.data(), DType::f32, c.layout, v_shape);
        in.kv_lengths = c.kv_lengths;
        if (c.bool_mask) in.bool_mask = MaskView{bool_mask.data(), *c.bool_mask};
        if (c.float_mask) in.float_mask = MaskView{float_mask.data(), *c.float_mask};
        in.sinks = sinks;
        in.alibi_slopes = slopes;
        return in;
    }
    TensorView grad_out_view() const { return make_view<const void*>(grad_out.data(), DType::f32, c.layout, o_shape); }

    // loss = Σ grad_out · o, o from the forward reference in double.
    double loss() const {
        const ReferenceStages st = reference_stages(inputs(), c.options, false);
        const TensorView g = grad_out_view();
        double sum = 0.0;
        std::size_t at = 0;
        for (std::int64_t b = 0; b < c.B; ++b)
            for (std::int64_t h = 0; h < c.Hq; ++h)
                for (std::int64_t i = 0; i < c.Nq; ++i)
                    for (std::int64_t e = 0; e < c.Dv; ++e, ++at)
                        sum += st.output[at] * static_cast<const float*>(g.data)[g.offset(b, h, i, e)];
        return sum;
    }
};

struct Grads {
    std::vector<float> dq, dk, dv, d_sinks, d_mask;
};

inline Grads backward(const Data& d) {
    Grads g;
    g.dq.assign(d.q.size(), std::nanf(""));
    g.dk.assign(d.k.size(), std::nanf(""));
    g.dv.assign(d.v.size(), std::nanf(""));
    g.d_sinks.assign(d.sinks.size(), std::nanf(""));
    g.d_mask.assign(d.float_mask.size(), std::nanf(""));
    AttentionGradients grads;
    grads.dq = make_view<void*>(g.dq.data(), DType::f32, d.c.layout, d.q_shape);
    grads.dk = make_view<void*>(g.dk.data(), DType::f32, d.c.layout, d.k_shape);
    grads.dv = make_view<void*>(g.dv.data(), DType::f32, d.c.layout, d.v_shape);
    if (!d.sinks.empty()) grads.d_sinks = g.d_sinks.data();
    if (!d.float_mask.empty()) grads.d_float_mask = g.d_mask.data();
    reference_attention_backward(d.inputs(), d.grad_out_view(), grads, d.c.options);
    return g;
}

}  // namespace vkattn::backward_test

// The CPU reference of the backward pass: against finite differences of the forward reference (in
// double), and against a closed form (dV = Wᵀ·dO with dropout's weights). The problem:
// support/reference_backward_case.hpp.
#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "npy.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/reference.hpp"
#include "support/reference_backward_case.hpp"

using namespace vkattn;
using namespace vkattn::backward_test;

namespace {

// Central differences of the loss over every finite element of `values` (a buffer of `data`),
// against the analytic gradient `grad` of the same layout. The step is what float32 could represent
// of ±2^-11 around each value.
void check_finite_differences(Data& data, std::vector<float>& values, const std::vector<float>& grad, const char* what) {
    INFO(data.c.name << ": " << what);
    REQUIRE(grad.size() == values.size());
    double worst = 0.0, largest = 0.0;
    for (std::size_t e = 0; e < values.size(); ++e) {
        const float x = values[e];
        if (!std::isfinite(x)) {
            CHECK(grad[e] == 0.0f);  // a blocked (−∞) mask entry or a head without a sink
            continue;
        }
        const float up = x + 0x1p-11f, down = x - 0x1p-11f;
        values[e] = up;
        const double l_up = data.loss();
        values[e] = down;
        const double l_down = data.loss();
        values[e] = x;
        const double fd = (l_up - l_down) / (static_cast<double>(up) - static_cast<double>(down));
        worst = std::max(worst, std::abs(fd - grad[e]));
        largest = std::max(largest, std::abs(static_cast<double>(grad[e])));
    }
    INFO("largest |gradient| " << largest << ", worst |fd - analytic| " << worst);
    CHECK(largest > 0.0);  // the check has something to check
    CHECK(worst <= 2e-6 + 1e-5 * largest);
}

std::vector<Case> feature_cases() {
    std::vector<Case> cases;
    auto add = [&](const std::string& name, auto&& tweak) {
        Case c;
        c.name = name;
        tweak(c);
        cases.push_back(c);
    };
    add("plain", [](Case&) {});
    add("gqa, Dk != Dv", [](Case& c) { c.Hq = 4, c.Hkv = 2, c.Dk = 7, c.Dv = 3; });
    add("mqa", [](Case& c) { c.Hq = 3, c.Hkv = 1; });
    add("causal top-left", [](Case& c) { c.options.causal = Causal::top_left; });
    add("causal bottom-right, key lengths", [](Case& c) {
        c.options.causal = Causal::bottom_right;
        c.kv_lengths = {7, 5};
    });
    add("causal offset", [](Case& c) { c.options.causal_offset = 2; });
    add("sliding window", [](Case& c) { c.options.window = {2, 1}; });
    add("bool mask [Nq, Nkv]", [](Case& c) { c.bool_mask = std::vector<std::int64_t>{5, 7}; });
    add("float mask [1, Hq, 1, Nkv]", [](Case& c) { c.float_mask = std::vector<std::int64_t>{1, 2, 1, 7}; });
    add("float mask [B, 1, Nq, Nkv]", [](Case& c) { c.float_mask = std::vector<std::int64_t>{2, 1, 5, 7}; });
    add("float mask [Nkv]", [](Case& c) { c.float_mask = std::vector<std::int64_t>{7}; });
    add("softcap", [](Case& c) {
        c.options.softcap = 1.5;
        c.spread = 2.5f;  // scores where tanh bends
    });
    add("alibi", [](Case& c) { c.alibi = true; });
    add("sinks", [](Case& c) { c.sinks = true; });
    add("dropout", [](Case& c) {
        c.options.dropout = 0.3;
        c.options.seed = 11;
    });
    add("scale", [](Case& c) { c.options.scale = 0.9; });
    add("layout bnhd", [](Case& c) { c.layout = Layout::bnhd; });
    add("a batch without keys", [](Case& c) {
        c.kv_lengths = {0, 7};
        c.sinks = true;
    });
    add("everything", [](Case& c) {
        c.Hq = 4, c.Hkv = 2, c.Nq = 6, c.Nkv = 9, c.Dk = 5, c.Dv = 4;
        c.options.causal = Causal::bottom_right;
        c.kv_lengths = {9, 6};
        c.options.window = {4, 1};
        c.bool_mask = std::vector<std::int64_t>{1, 4, 6, 9};
        c.float_mask = std::vector<std::int64_t>{6, 9};
        c.options.softcap = 2.0;
        c.alibi = true;
        c.sinks = true;
        c.options.dropout = 0.2;
        c.options.seed = 5;
        c.layout = Layout::bnhd;
        c.spread = 1.5f;
    });
    return cases;
}

}  // namespace

TEST_CASE("reference backward: every feature against finite differences of the forward", "[unit][reference][backward]") {
    std::uint32_t seed = 100;
    for (const Case& c : feature_cases()) {
        Data data(c, seed++);
        const Grads g = backward(data);
        check_finite_differences(data, data.q, g.dq, "dq");
        check_finite_differences(data, data.k, g.dk, "dk");
        check_finite_differences(data, data.v, g.dv, "dv");
        if (c.sinks) check_finite_differences(data, data.sinks, g.d_sinks, "d_sinks");
        if (c.float_mask) check_finite_differences(data, data.float_mask, g.d_mask, "d_float_mask");
    }
}

TEST_CASE("reference backward: rows without a visible key give zero gradients", "[unit][reference][backward]") {
    Case c;
    c.name = "empty";
    c.kv_lengths = {0, 7};  // batch 0 sees nothing, and has no sink
    Data data(c, 3);
    const Grads g = backward(data);
    const std::size_t half_q = data.q.size() / 2, half_k = data.k.size() / 2;
    CHECK(std::all_of(g.dq.begin(), g.dq.begin() + static_cast<std::ptrdiff_t>(half_q), [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(g.dk.begin(), g.dk.begin() + static_cast<std::ptrdiff_t>(half_k), [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(g.dv.begin(), g.dv.begin() + static_cast<std::ptrdiff_t>(half_k), [](float x) { return x == 0.0f; }));
    CHECK(std::any_of(g.dq.begin() + static_cast<std::ptrdiff_t>(half_q), g.dq.end(), [](float x) { return x != 0.0f; }));
}

TEST_CASE("reference backward: with dropout, dV is exactly the dropped, rescaled weights times dO", "[unit][reference][backward]") {
    Case c;
    c.name = "dropout";
    c.Hq = 4, c.Hkv = 2;
    c.options.dropout = 0.4;
    c.options.seed = 99;
    c.options.causal = Causal::top_left;
    Data data(c, 21);
    const Grads g = backward(data);
    const ReferenceStages st = reference_stages(data.inputs(), c.options);  // weights after dropout
    const std::int64_t group = c.Hq / c.Hkv;
    const TensorView dv_view = make_view<const void*>(g.dv.data(), DType::f32, c.layout, data.v_shape);
    std::size_t dropped = 0;
    for (const double w : st.weights) dropped += w == 0.0 ? 1 : 0;
    CHECK(dropped > 0);
    for (std::int64_t b = 0; b < c.B; ++b)
        for (std::int64_t hk = 0; hk < c.Hkv; ++hk)
            for (std::int64_t j = 0; j < c.Nkv; ++j)
                for (std::int64_t e = 0; e < c.Dv; ++e) {
                    double want = 0.0;
                    for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h)
                        for (std::int64_t i = 0; i < c.Nq; ++i)
                            want += st.weights[static_cast<std::size_t>(((b * c.Hq + h) * c.Nq + i) * c.Nkv + j)] *
                                    data.grad_out[static_cast<std::size_t>(((b * c.Hq + h) * c.Nq + i) * c.Dv + e)];
                    const float got = static_cast<const float*>(dv_view.data)[dv_view.offset(b, hk, j, e)];
                    CHECK(got == Approx(want).margin(1e-7).epsilon(1e-6));
                }
}

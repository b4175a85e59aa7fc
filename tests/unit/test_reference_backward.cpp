// The CPU reference of the backward pass: against finite differences of the forward reference (in
// double), against a closed form (dV = Wᵀ·dO with dropout's weights), against PyTorch autograd
// (tests/fixtures/backward, whose forward must also be the forward reference's), and its argument
// checks.
#include "support/catch.hpp"
#include "support/element_count.hpp"

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

using namespace vkattn;
using Shape = std::array<std::int64_t, 4>;

namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();

using test::element_count;

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

Grads backward(const Data& d) {
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

TEST_CASE("reference backward: a broadcast grad_out (stride 0) and f16 storage", "[unit][reference][backward]") {
    Case c;
    c.name = "broadcast";
    c.Hq = 4, c.Hkv = 1;
    c.options.causal = Causal::top_left;
    Data data(c, 8);
    std::fill(data.grad_out.begin(), data.grad_out.end(), 1.0f);
    const Grads dense = backward(data);
    AttentionGradients grads;
    std::vector<float> dq(data.q.size()), dk(data.k.size()), dv(data.v.size());
    grads.dq = make_view<void*>(dq.data(), DType::f32, c.layout, data.q_shape);
    grads.dk = make_view<void*>(dk.data(), DType::f32, c.layout, data.k_shape);
    grads.dv = make_view<void*>(dv.data(), DType::f32, c.layout, data.v_shape);
    const float one = 1.0f;
    const TensorView ones{&one, DType::f32, data.o_shape, {0, 0, 0, 0}};  // PyTorch's grad of out.sum()
    // Strides of 0 everywhere but features: the feature stride must be 1, so a row of ones.
    std::vector<float> row(static_cast<std::size_t>(c.Dv), 1.0f);
    const TensorView broadcast{row.data(), DType::f32, data.o_shape, {0, 0, 0, 1}};
    reference_attention_backward(data.inputs(), broadcast, grads, c.options);
    CHECK(dq == dense.dq);
    CHECK(dk == dense.dk);
    CHECK(dv == dense.dv);
    CHECK_THROWS_AS(reference_attention_backward(data.inputs(), ones, grads, c.options), InvalidArgument);

    // f16 q, k, v and grad_out (values representable in f16): the gradients are the f32 ones of the
    // same values, rounded once to f16.
    for (auto* t : {&data.q, &data.k, &data.v, &data.grad_out})
        for (auto& x : *t) x = half_to_float(float_to_half(x));
    const Grads want = backward(data);
    auto halves = [](const std::vector<float>& f) {
        std::vector<std::uint16_t> h(f.size());
        std::transform(f.begin(), f.end(), h.begin(), float_to_half);
        return h;
    };
    const auto q16 = halves(data.q), k16 = halves(data.k), v16 = halves(data.v), g16 = halves(data.grad_out);
    std::vector<std::uint16_t> dq16(q16.size()), dk16(k16.size()), dv16(v16.size());
    AttentionInputs in;
    in.q = make_view<const void*>(q16.data(), DType::f16, c.layout, data.q_shape);
    in.k = make_view<const void*>(k16.data(), DType::f16, c.layout, data.k_shape);
    in.v = make_view<const void*>(v16.data(), DType::f16, c.layout, data.v_shape);
    AttentionGradients g16grads;
    g16grads.dq = make_view<void*>(dq16.data(), DType::f16, c.layout, data.q_shape);
    g16grads.dk = make_view<void*>(dk16.data(), DType::f16, c.layout, data.k_shape);
    g16grads.dv = make_view<void*>(dv16.data(), DType::f16, c.layout, data.v_shape);
    reference_attention_backward(in, make_view<const void*>(g16.data(), DType::f16, c.layout, data.o_shape), g16grads,
                                 c.options);
    for (auto [got, ref] : {std::pair{&dq16, &want.dq}, std::pair{&dk16, &want.dk}, std::pair{&dv16, &want.dv}})
        for (std::size_t e = 0; e < got->size(); ++e) CHECK((*got)[e] == float_to_half((*ref)[e]));
}

TEST_CASE("reference backward: PyTorch autograd fixtures (float64)", "[unit][reference][backward]") {
    const std::filesystem::path root = std::filesystem::path(VKATTN_FIXTURES) / "backward" / "data";
    int cases = 0;
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
        const auto dir = entry.path();
        INFO(dir.filename().string());
        std::ifstream json_file(dir / "case.json");
        const nlohmann::json cs = nlohmann::json::parse(json_file);
        auto read = [&](const char* name) { return npy::read(dir / (std::string(name) + ".npy")); };
        auto floats = [](const npy::Array& a) { return std::vector<float>(a.as<float>(), a.as<float>() + a.count()); };
        auto shape4 = [](const npy::Array& a) { return Shape{a.shape[0], a.shape[1], a.shape[2], a.shape[3]}; };
        const npy::Array q = read("q"), k = read("k"), v = read("v"), g = read("grad_out");
        AttentionInputs in;
        in.q = make_view<const void*>(q.as<float>(), DType::f32, Layout::bhnd, shape4(q));
        in.k = make_view<const void*>(k.as<float>(), DType::f32, Layout::bhnd, shape4(k));
        in.v = make_view<const void*>(v.as<float>(), DType::f32, Layout::bhnd, shape4(v));
        AttentionOptions options;
        options.scale = cs["scale"].get<double>();
        const std::string causal = cs["causal"];
        options.causal = causal == "top_left" ? Causal::top_left : causal == "bottom_right" ? Causal::bottom_right : Causal::none;
        if (!cs["window"].is_null()) options.window = {cs["window"][0].get<std::int64_t>(), cs["window"][1].get<std::int64_t>()};
        if (!cs["softcap"].is_null()) options.softcap = cs["softcap"].get<double>();
        std::optional<npy::Array> lengths, bool_mask, float_mask, slopes, sinks;
        if (!cs["kv_lengths"].is_null()) {
            lengths = read("kv_lengths");
            in.kv_lengths = {lengths->as<std::int32_t>(), static_cast<std::size_t>(lengths->count())};
        }
        if (!cs["bool_mask"].is_null()) {
            bool_mask = read("bool_mask");
            in.bool_mask = MaskView{bool_mask->data.data(), bool_mask->shape};
        }
        if (!cs["float_mask"].is_null()) {
            float_mask = read("float_mask");
            in.float_mask = MaskView{float_mask->data.data(), float_mask->shape};
        }
        if (cs["alibi"].get<bool>()) {
            slopes = read("alibi_slopes");
            in.alibi_slopes = {slopes->as<float>(), static_cast<std::size_t>(slopes->count())};
        }
        if (cs["sinks"].get<bool>()) {
            sinks = read("sinks");
            in.sinks = {sinks->as<float>(), static_cast<std::size_t>(sinks->count())};
        }
        std::vector<float> dq(static_cast<std::size_t>(q.count())), dk(static_cast<std::size_t>(k.count())),
            dv(static_cast<std::size_t>(v.count())), d_sinks(sinks ? static_cast<std::size_t>(sinks->count()) : 0),
            d_mask(float_mask ? static_cast<std::size_t>(float_mask->count()) : 0);
        AttentionGradients grads;
        grads.dq = make_view<void*>(dq.data(), DType::f32, Layout::bhnd, shape4(q));
        grads.dk = make_view<void*>(dk.data(), DType::f32, Layout::bhnd, shape4(k));
        grads.dv = make_view<void*>(dv.data(), DType::f32, Layout::bhnd, shape4(v));
        if (sinks) grads.d_sinks = d_sinks.data();
        if (float_mask) grads.d_float_mask = d_mask.data();
        reference_attention_backward(in, make_view<const void*>(g.as<float>(), DType::f32, Layout::bhnd, shape4(g)), grads,
                                     options);
        auto compare = [&](const std::vector<float>& got, const char* name) {
            const std::vector<float> want = floats(read(name));
            INFO(name);
            REQUIRE(got.size() == want.size());
            for (std::size_t e = 0; e < got.size(); ++e) CHECK(got[e] == Approx(want[e]).margin(1e-6).epsilon(1e-5));
        };
        // The fixture's forward is vkattn's: its o is the forward reference's.
        std::vector<float> o(static_cast<std::size_t>(g.count()));
        reference_attention(in, {.o = make_view<void*>(o.data(), DType::f32, Layout::bhnd, shape4(g))}, options);
        compare(o, "o");
        compare(dq, "dq");
        compare(dk, "dk");
        compare(dv, "dv");
        if (sinks) compare(d_sinks, "d_sinks");
        if (float_mask) compare(d_mask, "d_float_mask");
        ++cases;
    }
    CHECK(cases == 8);
}

TEST_CASE("reference backward: bad arguments are named, nothing is written", "[unit][reference][backward]") {
    Case c;
    c.name = "errors";
    c.sinks = false;
    Data data(c, 4);
    auto expect_error = [&](const std::string& argument, auto&& tweak) {
        AttentionInputs in = data.inputs();
        TensorView grad_out = data.grad_out_view();
        std::vector<float> dq(data.q.size(), 7.0f), dk(data.k.size(), 7.0f), dv(data.v.size(), 7.0f), extra(64, 7.0f);
        AttentionGradients grads;
        grads.dq = make_view<void*>(dq.data(), DType::f32, c.layout, data.q_shape);
        grads.dk = make_view<void*>(dk.data(), DType::f32, c.layout, data.k_shape);
        grads.dv = make_view<void*>(dv.data(), DType::f32, c.layout, data.v_shape);
        tweak(in, grad_out, grads, extra);
        INFO(argument);
        try {
            reference_attention_backward(in, grad_out, grads, c.options);
            FAIL("no error");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == argument);
        }
        for (const auto* t : {&dq, &dk, &dv, &extra})
            CHECK(std::all_of(t->begin(), t->end(), [](float x) { return x == 7.0f; }));
    };
    using G = AttentionGradients;
    using F = std::vector<float>;
    expect_error("grad_out", [](AttentionInputs&, TensorView& g, G&, F&) { g.shape[3] += 1; });
    expect_error("grad_out", [](AttentionInputs&, TensorView& g, G&, F&) { g.dtype = DType::f16; });
    expect_error("grad_out", [](AttentionInputs&, TensorView& g, G&, F&) { g.data = nullptr; });
    expect_error("dq", [](AttentionInputs&, TensorView&, G& g, F&) { g.dq.shape[2] -= 1; });
    expect_error("dk", [](AttentionInputs&, TensorView&, G& g, F&) { g.dk.dtype = DType::bf16; });
    expect_error("dv", [](AttentionInputs&, TensorView&, G& g, F&) { g.dv.strides[2] = 0; });
    expect_error("d_sinks", [](AttentionInputs&, TensorView&, G& g, F& extra) { g.d_sinks = extra.data(); });
    expect_error("d_float_mask", [](AttentionInputs&, TensorView&, G& g, F& extra) { g.d_float_mask = extra.data(); });
    std::vector<std::uint8_t> q8(static_cast<std::size_t>(c.B * c.Hkv * c.Nkv) * 34, 0);
    expect_error("k", [&](AttentionInputs& in, TensorView&, G& g, F&) {
        in.k = make_view<const void*>(q8.data(), DType::q8_0, Layout::bhnd, {c.B, c.Hkv, c.Nkv, 32});
        g.dk.data = nullptr;
    });
}

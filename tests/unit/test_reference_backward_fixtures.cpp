// The CPU reference of the backward pass against PyTorch autograd (tests/fixtures/backward, whose
// forward must also be the forward reference's), with a broadcast grad_out and f16 storage, and its
// argument checks.
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

// The model features (causal offset, sliding window, softcap, ALiBi, sinks, dropout) in every path
// and dtype against the CPU reference: each alone, all together with every mask kind, the edge
// cases their definitions call out, and dropout's own contract.
#include "support/catch.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "support/expect_case.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"

using namespace vkattn;
using namespace vkattn::test;
using namespace vkattn::testing;

namespace {

// A GQA case with awkward sizes: Nq and Nkv not multiples of any tile, Dk != Dv.
Case base_case(Impl impl, DType dtype) {
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = 19;
    c.Nkv = 70;
    c.Dk = 24;
    c.Dv = 28;
    c.dtype = dtype;
    c.impl = impl;
    c.weights = impl == Impl::unfused;  // only the three-stage path returns them
    c.splits = impl == Impl::split ? 3 : 0;
    return c;
}

using Feature = void (*)(Case&);

}  // namespace

TEST_CASE("features: each alone in every path and dtype", "[gpu][features]") {
    const auto [name, feature] = GENERATE(table<const char*, Feature>({
        {"causal offset +3", [](Case& c) { c.causal_offset = 3; }},
        {"causal offset -5", [](Case& c) { c.causal_offset = -5; }},
        {"causal offset past the keys", [](Case& c) { c.causal_offset = 200; }},
        {"window (4 2)", [](Case& c) { c.window = {4, 2}; }},
        {"window left only (9)", [](Case& c) { c.window = {9, -1}; }},
        {"window right only (0)", [](Case& c) { c.window = {-1, 0}; }},
        {"window + bottom-right causal", [](Case& c) { c.window = {6, -1}; c.causal = Causal::bottom_right; }},
        {"softcap 5", [](Case& c) { c.softcap = 5.0; c.amplitude = 3.0f; }},
        {"ALiBi max bias 8", [](Case& c) { c.alibi_max_bias = 8.0; }},
        {"ALiBi slopes", [](Case& c) { c.alibi_slopes = true; }},
        {"sinks", [](Case& c) { c.sinks = true; }},
        {"dropout 0.2", [](Case& c) { c.dropout = 0.2; c.dropout_seed = 42; }},
    }));
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    INFO(name);
    Case c = base_case(impl, dtype);
    feature(c);
    expect_pass(c, impl);
}

TEST_CASE("features: all together with every mask kind in every path", "[gpu][features][mask]") {
    const int alignment = GENERATE(0, 1, 2, 3);  // none, top-left, bottom-right, offset -2
    const bool lengths = GENERATE(false, true);
    const bool bool_mask = GENERATE(false, true);
    const bool float_mask = GENERATE(false, true);
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    Case c = base_case(impl, DType::f32);
    if (alignment == 1) c.causal = Causal::top_left;
    if (alignment == 2) c.causal = Causal::bottom_right;
    if (alignment == 3) c.causal_offset = -2;
    c.kv_lengths = lengths;
    if (bool_mask) c.bool_mask_shape = std::vector<std::int64_t>{2, 4, c.Nq, c.Nkv};
    if (float_mask) c.float_mask_shape = std::vector<std::int64_t>{2, 1, 1, c.Nkv};
    c.window = {30, 5};
    c.softcap = 20.0;
    c.alibi_slopes = true;
    c.sinks = true;
    c.dropout = 0.1;
    c.dropout_seed = 7;
    expect_pass(c, impl);
}

TEST_CASE("features: fp16 with all features and a long windowed sequence", "[gpu][features]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    Case c = base_case(impl, DType::f16);
    c.Nq = c.Nkv = 700;
    c.causal = Causal::top_left;
    c.window = {100, -1};
    c.softcap = 30.0;
    c.alibi_max_bias = 8.0;
    c.sinks = true;
    expect_pass(c, impl);
}

namespace {

struct Outputs {
    HostTensor o;
    std::vector<float> weights, lse;
    AttentionReport report;
};

// Runs one request on host tensors (q, k, v fixed by the caller), outputs NaN-poisoned.
Outputs run(const HostTensor& q, const HostTensor& k, const HostTensor& v, const AttentionOptions& options,
            bool weights, std::span<const float> sinks = {}) {
    Context& ctx = gpu_context();
    const auto& s = q.shape;
    Outputs r{nan_tensor(q.dtype, Layout::bhnd, {s[0], s[1], s[2], v.shape[3]}), {}, {}, {}};
    r.lse.assign(static_cast<std::size_t>(s[0] * s[1] * s[2]), std::numeric_limits<float>::quiet_NaN());
    if (weights) r.weights.assign(static_cast<std::size_t>(s[0] * s[1] * s[2] * k.shape[2]), std::numeric_limits<float>::quiet_NaN());
    AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .sinks = sinks};
    AttentionOutputs out{.o = r.o.mutable_view(), .weights = weights ? r.weights.data() : nullptr, .lse = r.lse.data()};
    r.report = attention(ctx, in, out, options);
    CHECK(take_validation_messages(ctx).empty());
    return r;
}

}  // namespace

TEST_CASE("features: a window or offset that leaves rows empty gives zeros (and the sink's lse)", "[gpu][features]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    const bool with_sinks = GENERATE(false, true);
    std::mt19937 rng(fresh_seed());
    const std::int64_t B = 1, H = 2, N = 40, D = 16;
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, N, D});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, N, D});
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, N, D});
    const std::vector<float> sinks{0.5f, -1.5f};
    // Offset -10: rows 0..9 see no key. The window (3, 3) around it keeps rows 10.. non-empty.
    AttentionOptions options{.causal_offset = -10, .window = {3, 3}, .impl = impl,
                             .splits = impl == Impl::split ? 4u : 0u};
    const Outputs r = run(q, k, v, options, impl == Impl::unfused, with_sinks ? std::span<const float>(sinks) : std::span<const float>());
    for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < N; ++i) {
            const float lse = r.lse[static_cast<std::size_t>(h * N + i)];
            if (i < 10) {
                for (std::int64_t d = 0; d < D; ++d) CHECK(r.o.at(0, h, i, d) == 0.0);
                // An empty row's lse is the sink, carried through the kernels' base-2 softmax (times
                // log2 e and back) and the device's exp and log: exact on lavapipe, within rounding
                // where a GPU's exp2 and log2 are approximations.
                if (with_sinks) CHECK(lse == Approx(sinks[static_cast<std::size_t>(h)]).margin(1e-6));
                else CHECK(lse == -std::numeric_limits<float>::infinity());
            } else {
                CHECK(std::isfinite(lse));
            }
        }
}

TEST_CASE("features: softcap with -inf masks leaks nothing", "[gpu][features]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    Case c = base_case(impl, DType::f32);
    c.softcap = 2.0;
    c.amplitude = 10.0f;  // scores far beyond the cap: every visible logit saturates near ±2
    c.float_mask_shape = std::vector<std::int64_t>{c.Nq, c.Nkv};  // with -inf entries
    c.bool_mask_shape = std::vector<std::int64_t>{2, 1, c.Nq, c.Nkv};
    expect_pass(c, impl);  // the weights compare includes exact zeros at masked keys
}

TEST_CASE("features: dropout's contract", "[gpu][features][dropout]") {
    std::mt19937 rng(fresh_seed());
    const std::int64_t B = 2, H = 4, Nq = 64, Nkv = 257, D = 32;
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, Nq, D});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, Nkv, D});
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, Nkv, D});
    const double p = 0.3;
    const AttentionOptions plain{.impl = Impl::unfused};
    AttentionOptions dropped = plain;
    dropped.dropout = p;
    dropped.seed = 0x1234'5678'9abcULL;

    const Outputs base = run(q, k, v, plain, true);
    const Outputs a = run(q, k, v, dropped, true);

    SECTION("keep rate within statistical bounds and kept weights exactly rescaled") {
        std::int64_t total = 0, kept = 0;
        for (std::size_t x = 0; x < a.weights.size(); ++x) {
            ++total;
            if (a.weights[x] == 0.0f) continue;
            ++kept;
            CHECK(a.weights[x] == Approx(base.weights[x] / (1.0 - p)).epsilon(1e-6));
        }
        const double rate = static_cast<double>(kept) / static_cast<double>(total);
        const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(total));
        INFO("keep rate " << rate << " over " << total << " weights");
        CHECK(std::abs(rate - (1.0 - p)) < 6.0 * sigma);
        CHECK(a.lse == base.lse);  // the log-sum-exp is the softmax's, before dropout
    }
    SECTION("out = returned weights · V") {
        for (std::int64_t b = 0; b < B; ++b)
            for (std::int64_t h = 0; h < H; ++h)
                for (std::int64_t i = 0; i < Nq; ++i)
                    for (std::int64_t d = 0; d < D; ++d) {
                        double want = 0.0;
                        for (std::int64_t j = 0; j < Nkv; ++j)
                            want += a.weights[static_cast<std::size_t>(((b * H + h) * Nq + i) * Nkv + j)] * v.at(b, h, j, d);
                        CHECK(a.o.at(b, h, i, d) == Approx(want).epsilon(1e-5).margin(1e-5));
                    }
    }
    SECTION("same seed bit-identical in each path, another seed different") {
        for (const Impl impl : {Impl::unfused, Impl::fused, Impl::split}) {
            AttentionOptions o = dropped;
            o.impl = impl;
            o.splits = impl == Impl::split ? 3 : 0;
            const bool w = impl == Impl::unfused;
            const Outputs x = run(q, k, v, o, w), y = run(q, k, v, o, w);
            CHECK(std::memcmp(x.o.f32.data(), y.o.f32.data(), x.o.f32.size() * 4) == 0);
            o.seed += 1;
            const Outputs z = run(q, k, v, o, w);
            CHECK(std::memcmp(x.o.f32.data(), z.o.f32.data(), x.o.f32.size() * 4) != 0);
        }
    }
    SECTION("fused and split drop the same entries as the three-stage path") {
        for (const Impl impl : {Impl::fused, Impl::split}) {
            AttentionOptions o = dropped;
            o.impl = impl;
            o.splits = impl == Impl::split ? 3 : 0;
            const Outputs f = run(q, k, v, o, false);
            std::vector<double> got, want;
            for (std::int64_t b = 0; b < B; ++b)
                for (std::int64_t h = 0; h < H; ++h)
                    for (std::int64_t i = 0; i < Nq; ++i)
                        for (std::int64_t d = 0; d < D; ++d) {
                            got.push_back(f.o.at(b, h, i, d));
                            want.push_back(a.o.at(b, h, i, d));
                        }
            const Comparison cmp = compare(got, want, tolerance_for(DType::f32));
            INFO(to_string(impl) << ": " << cmp.message);
            CHECK(cmp.ok);
        }
    }
}

TEST_CASE("features: the report counts only the window's flops", "[gpu][features]") {
    std::mt19937 rng(fresh_seed());
    const std::int64_t N = 300, D = 16;
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, 1, N, D});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, 1, N, D});
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {1, 1, N, D});
    const Outputs full = run(q, k, v, {.impl = Impl::fused}, false);
    const Outputs windowed = run(q, k, v, {.causal = Causal::top_left, .window = {31, -1}, .impl = Impl::fused}, false);
    CHECK(full.report.flops == Approx(4.0 * N * N * D));
    // Row i sees min(i, 31) + 1 keys.
    double pairs = 0;
    for (std::int64_t i = 0; i < N; ++i) pairs += static_cast<double>(std::min<std::int64_t>(i, 31) + 1);
    CHECK(windowed.report.flops == Approx(4.0 * pairs * D));
}

TEST_CASE("features: a window's diagonal without causal masking equals its explicit mask", "[gpu][features]") {
    // diagonal_offset / diagonal_bottom_right place a window (and ALiBi) after a cache's past keys
    // without causality (ONNX Attention's windows): the same as the window's keys given as a bool mask.
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    const bool bottom_right = GENERATE(false, true);
    std::mt19937 rng(fresh_seed());
    const std::int64_t B = 2, H = 2, Nq = 9, Nkv = 30, D = 16, left = 4, right = 2, offset = 13;
    const std::vector<std::int32_t> lengths{30, 21};
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, Nq, D});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, Nkv, D});
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {B, H, Nkv, D});
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(B * Nq * Nkv));
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 0; i < Nq; ++i)
            for (std::int64_t j = 0; j < Nkv; ++j) {
                const std::int64_t at = i + (bottom_right ? lengths[static_cast<std::size_t>(b)] - Nq : offset);
                mask[static_cast<std::size_t>((b * Nq + i) * Nkv + j)] = j >= at - left && j <= at + right;
            }
    Context& ctx = gpu_context();
    auto run_with = [&](bool diagonal) {
        HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {B, H, Nq, D});
        AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .kv_lengths = lengths};
        AttentionOptions options{.impl = impl, .splits = impl == Impl::split ? 3u : 0u};
        if (diagonal) {
            options.window = {left, right};
            options.diagonal_offset = bottom_right ? 0 : offset;
            options.diagonal_bottom_right = bottom_right;
        } else {
            in.bool_mask = MaskView{mask.data(), {B, 1, Nq, Nkv}};
        }
        const AttentionReport report = attention(ctx, in, {.o = o.mutable_view()}, options);
        CHECK(report.path == impl);
        return o;
    };
    const HostTensor windowed = run_with(true), masked = run_with(false);
    const testing::Comparison c = testing::compare(windowed.doubles(), masked.doubles(), testing::tolerance_for(DType::f32));
    INFO(c.message);
    CHECK(c.ok);
    CHECK(take_validation_messages(ctx).empty());
    // With causal, causal's own alignment rules: refused by name.
    AttentionOptions both{.causal = Causal::top_left, .diagonal_offset = 3};
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {B, H, Nq, D});
    try {
        attention(ctx, {.q = q.view(), .k = k.view(), .v = v.view()}, {.o = o.mutable_view()}, both);
        FAIL("no error");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "diagonal_offset");
    }
}

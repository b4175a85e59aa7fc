// MhaLayer: the multi-head layer's weights on the device, its forward pass over device tensors and
// its decode steps over both KV caches, each checked against the CPU layer
// (reference_multi_head_attention, itself checked against PyTorch in test_mha.cpp). Outputs start as
// NaN (the suite's context poisons them).
#include "support/catch.hpp"

#include <cmath>
#include <optional>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/mha_layer.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

// A random layer; its weights live in the returned vectors (MhaWeights are views).
struct RandomLayer {
    std::vector<float> in_proj, wq, wk, wv, in_bias, wo, bo;
    std::optional<MultiHeadAttention> layer;
    RandomLayer(std::mt19937& rng, const MhaConfig& config) {
        const std::int64_t E = config.embed_dim, kdim = config.kdim ? config.kdim : E, vdim = config.vdim ? config.vdim : E;
        const float amp = 1.0f / std::sqrt(static_cast<float>(E));
        MhaWeights w;
        if (kdim == E && vdim == E) {
            in_proj = random_values(rng, 3 * E * E, amp);
            w.in_proj_weight = in_proj;
        } else {
            wq = random_values(rng, E * E, amp);
            wk = random_values(rng, E * kdim, amp);
            wv = random_values(rng, E * vdim, amp);
            w.q_proj_weight = wq;
            w.k_proj_weight = wk;
            w.v_proj_weight = wv;
        }
        wo = random_values(rng, E * E, amp);
        w.out_proj_weight = wo;
        if (config.bias) {
            in_bias = random_values(rng, 3 * E, 0.5f);
            bo = random_values(rng, E, 0.5f);
            w.in_proj_bias = in_bias;
            w.out_proj_bias = bo;
        }
        layer.emplace(config, w);
    }
};

// fp32 host values as a device tensor of `dtype` (rounded once, as the reference reads them).
DeviceTensor device_of(Context& ctx, const std::vector<float>& values, DType dtype, const std::array<std::int64_t, 4>& shape) {
    if (dtype == DType::f32) return DeviceTensor::from_host(ctx, make_view(static_cast<const void*>(values.data()), dtype, Layout::bhnd, shape));
    std::vector<std::uint16_t> h(values.size());
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = float_to_half(values[i]);
    return DeviceTensor::from_host(ctx, make_view(static_cast<const void*>(h.data()), dtype, Layout::bhnd, shape));
}

std::vector<double> host_of(const DeviceTensor& t) {
    HostTensor h = nan_tensor(t.dtype(), Layout::bhnd, t.shape());
    t.download(h.mutable_view());
    std::vector<double> out(static_cast<std::size_t>(h.count()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.dtype() == DType::f32 ? h.f32[i] : half_to_float(h.f16[i]);
    return out;
}

// The values the device stores: fp16 rounds them.
std::vector<float> stored(std::vector<float> v, DType dtype) {
    if (dtype == DType::f16)
        for (float& x : v) x = half_to_float(float_to_half(x));
    return v;
}

void check(const std::vector<double>& got, const std::vector<float>& ref, DType dtype, const std::string& what) {
    const Comparison cmp = compare(got, {ref.begin(), ref.end()}, tolerance_for(dtype));
    INFO(what << ": " << cmp.message);
    REQUIRE(cmp.ok);
}

}  // namespace

TEST_CASE("mha layer: forward on device tensors matches the CPU layer, weights uploaded once", "[gpu][mha][mha_layer]") {
    Context& ctx = test::gpu_context();
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const int shape = GENERATE(0, 1, 2);
    std::mt19937 rng(81 + static_cast<unsigned>(shape));
    MhaConfig config{.embed_dim = 24, .num_heads = 3};
    std::int64_t L = 9, S = 9, N = 2;
    bool self = true, causal = false;
    switch (shape) {
        case 0: causal = true; break;                                                         // causal self-attention
        case 1: config.batch_first = true; config.bias = false; N = 3; L = 5; break;           // batch_first, no bias
        case 2: config.kdim = 10; config.vdim = 14; self = false; S = 13; break;               // cross, kdim != vdim
    }
    const RandomLayer random(rng, config);
    const MultiHeadAttention& module = *random.layer;
    const MhaLayer layer(ctx, module, dtype);
    CHECK(layer.weight_bytes() > 0);
    const std::int64_t kdim = module.config().kdim, vdim = module.config().vdim;
    auto act = [&](std::int64_t T, std::int64_t F) {
        return config.batch_first ? std::array<std::int64_t, 4>{1, N, T, F} : std::array<std::int64_t, 4>{1, T, N, F};
    };
    auto torch = [&](std::int64_t T, std::int64_t F) {
        return config.batch_first ? std::vector<std::int64_t>{N, T, F} : std::vector<std::int64_t>{T, N, F};
    };
    const DeviceTensor out = DeviceTensor::empty(ctx, dtype, act(L, config.embed_dim));
    for (int run = 0; run < 2; ++run) {  // the same layer, new inputs: nothing is uploaded again
        const auto query = stored(random_values(rng, N * L * config.embed_dim, 1.5f), dtype);
        const auto key = self ? query : stored(random_values(rng, N * S * kdim, 1.5f), dtype);
        const auto value = self ? query : stored(random_values(rng, N * S * vdim, 1.5f), dtype);
        const DeviceTensor q = device_of(ctx, query, dtype, act(L, config.embed_dim));
        const DeviceTensor k = self ? q : device_of(ctx, key, dtype, act(S, kdim));
        const DeviceTensor v = self ? q : device_of(ctx, value, dtype, act(S, vdim));
        Batch batch(ctx);
        layer.forward(batch, q, k, v, out, {.causal = causal});
        batch.submit().wait();

        MhaInputs in{.query = {query.data(), torch(L, config.embed_dim)}};
        if (!self) {
            in.key = {key.data(), torch(S, kdim)};
            in.value = {value.data(), torch(S, vdim)};
        }
        std::vector<std::uint8_t> above;  // PyTorch's causal mask: TRUE = not allowed
        if (causal) {
            for (std::int64_t i = 0; i < L; ++i)
                for (std::int64_t j = 0; j < S; ++j) above.push_back(j > i);
            in.attn_mask = TorchMask{above.data(), true, {L, S}};
        }
        std::vector<float> ref(static_cast<std::size_t>(N * L * config.embed_dim), NAN);
        reference_multi_head_attention(module, in, {ref.data()}, {.dtype = dtype});
        check(host_of(out), ref, dtype, "run " + std::to_string(run));
    }
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("mha layer: decoding over a KV cache projects only the new tokens and matches the CPU layer", "[gpu][mha][mha_layer][cache]") {
    Context& ctx = test::gpu_context();
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const bool paged = GENERATE(false, true);
    const bool batch_first = GENERATE(false, true);
    std::mt19937 rng(91);
    const MhaConfig config{.embed_dim = 32, .num_heads = 4, .batch_first = batch_first};
    const RandomLayer random(rng, config);
    const MultiHeadAttention& module = *random.layer;
    const MhaLayer layer(ctx, module, dtype);
    const std::int64_t N = 2, E = config.embed_dim, capacity = 40;
    std::optional<KvCache> contiguous;
    std::optional<PagedKvCache> blocks;
    if (paged) blocks.emplace(ctx, layer.paged_cache_options(N, 12, 5));
    else contiguous.emplace(ctx, layer.cache_options(N, capacity));
    auto act = [&](std::int64_t T) {
        return batch_first ? std::array<std::int64_t, 4>{1, N, T, E} : std::array<std::int64_t, 4>{1, T, N, E};
    };
    // Every token so far, per sequence, to give the CPU layer the whole context each step.
    std::vector<std::vector<float>> seen(static_cast<std::size_t>(N));
    for (const std::int64_t T : {std::int64_t{11}, std::int64_t{1}, std::int64_t{3}, std::int64_t{1}}) {  // a prompt, then steps
        const auto x = stored(random_values(rng, T * N * E, 1.5f), dtype);
        const DeviceTensor x_dev = device_of(ctx, x, dtype, act(T));
        const DeviceTensor out = DeviceTensor::empty(ctx, dtype, act(T));
        Batch batch(ctx);
        if (paged) layer.decode(batch, *blocks, x_dev, out);
        else layer.decode(batch, *contiguous, x_dev, out);
        batch.submit().wait();

        // The CPU layer on one sequence at a time: its T new queries over its whole context, query t
        // seeing the keys up to its own position.
        const std::vector<double> got = host_of(out);
        for (std::int64_t n = 0; n < N; ++n) {
            auto& context = seen[static_cast<std::size_t>(n)];
            std::vector<float> query;
            for (std::int64_t t = 0; t < T; ++t) {
                const std::int64_t row = batch_first ? n * T + t : t * N + n;
                query.insert(query.end(), x.begin() + row * E, x.begin() + (row + 1) * E);
            }
            context.insert(context.end(), query.begin(), query.end());
            const std::int64_t S = static_cast<std::int64_t>(context.size()) / E;
            std::vector<std::uint8_t> future;
            for (std::int64_t t = 0; t < T; ++t)
                for (std::int64_t j = 0; j < S; ++j) future.push_back(j > S - T + t);
            const MhaInputs in{.query = {query.data(), {T, E}}, .key = {context.data(), {S, E}},
                               .value = {context.data(), {S, E}}, .attn_mask = TorchMask{future.data(), true, {T, S}}};
            std::vector<float> ref(static_cast<std::size_t>(T * E), NAN);
            reference_multi_head_attention(module, in, {ref.data()}, {.dtype = dtype});
            std::vector<double> mine;
            for (std::int64_t t = 0; t < T; ++t) {
                const std::int64_t row = batch_first ? n * T + t : t * N + n;
                mine.insert(mine.end(), got.begin() + row * E, got.begin() + (row + 1) * E);
            }
            check(mine, ref, dtype, "sequence " + std::to_string(n) + " after " + std::to_string(S) + " tokens");
        }
    }
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("mha layer: bad tensors and caches name the argument", "[gpu][mha][mha_layer]") {
    Context& ctx = test::gpu_context();
    std::mt19937 rng(95);
    const RandomLayer random(rng, {.embed_dim = 16, .num_heads = 2});
    const MhaLayer layer(ctx, *random.layer);
    const DeviceTensor x = DeviceTensor::empty(ctx, DType::f32, {1, 1, 2, 16});
    const DeviceTensor out = DeviceTensor::empty(ctx, DType::f32, {1, 1, 2, 16});
    KvCache cache(ctx, layer.cache_options(2, 8));
    auto argument = [&](auto&& f) {
        try {
            f();
        } catch (const InvalidArgument& e) {
            return e.argument();
        }
        return std::string("(nothing thrown)");
    };
    Batch batch(ctx);
    CHECK(argument([&] { layer.decode(batch, cache, DeviceTensor::empty(ctx, DType::f16, {1, 1, 2, 16}), out); }) == "x");
    CHECK(argument([&] { layer.decode(batch, cache, DeviceTensor::empty(ctx, DType::f32, {1, 1, 2, 8}), out); }) == "x");
    const DeviceTensor wide = DeviceTensor::empty(ctx, DType::f32, {1, 2, 2, 16});
    CHECK(argument([&] { layer.decode(batch, cache, wide.seq(0, 1), out); }) == "x");  // a view with gaps
    CHECK(argument([&] { layer.decode(batch, cache, x, DeviceTensor::empty(ctx, DType::f32, {1, 2, 2, 16})); }) == "out");
    KvCache other(ctx, {.batch = 2, .kv_heads = 4, .capacity = 8, .dim = 4});
    CHECK(argument([&] { layer.decode(batch, other, x, out); }) == "cache");
    CHECK(argument([&] { layer.forward(batch, x, DeviceTensor::empty(ctx, DType::f32, {1, 1, 3, 16}), x, out); }) == "key");
    CHECK(argument([&] { MhaLayer(ctx, *random.layer, DType::i32); }) == "dtype");
    const RandomLayer cross(rng, {.embed_dim = 16, .num_heads = 2, .kdim = 8});
    const MhaLayer cross_layer(ctx, *cross.layer);
    CHECK(argument([&] { cross_layer.decode(batch, cache, x, out); }) == "x");
    // Nothing was recorded: the batch submits empty.
    batch.submit().wait();
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("mha layer backward: device tensors give the host API's gradients; refusals named", "[gpu][mha][backward]") {
    Context& ctx = test::gpu_context();
    std::mt19937 rng(91);
    const std::int64_t E = 16, H = 4, L = 5, S = 7, N = 2, kdim = 6, vdim = 10;
    auto zeros = [&](const std::array<std::int64_t, 4>& shape) { return DeviceTensor::empty(ctx, DType::f32, shape); };
    // Cross-attention with kdim and vdim (separate inputs, separate weights), then self-attention
    // (one tensor: its gradient the sum of three uses).
    for (const bool self : {false, true}) {
        INFO("self " << self);
        const MhaConfig config = self ? MhaConfig{.embed_dim = E, .num_heads = H}
                                      : MhaConfig{.embed_dim = E, .num_heads = H, .kdim = kdim, .vdim = vdim};
        const RandomLayer random(rng, config);
        const MultiHeadAttention& layer = *random.layer;
        const std::int64_t kd = self ? E : kdim, vd = self ? E : vdim, Sk = self ? L : S;
        const auto query = random_values(rng, L * N * E, 1.5f), key = random_values(rng, Sk * N * kd, 1.5f),
                   value = random_values(rng, Sk * N * vd, 1.5f), dy = random_values(rng, L * N * E, 1.0f);
        MhaInputs in{.query = {query.data(), {L, N, E}}};
        if (!self) {
            in.key = {key.data(), {S, N, kd}};
            in.value = {value.data(), {S, N, vd}};
        }
        const MhaLayerOptions options{.causal = true, .impl = Impl::unfused};
        // The host API with the same mask: PyTorch's causal attn_mask (true = not allowed).
        std::vector<std::uint8_t> causal(static_cast<std::size_t>(L * Sk));
        for (std::int64_t i = 0; i < L; ++i)
            for (std::int64_t j = 0; j < Sk; ++j) causal[static_cast<std::size_t>(i * Sk + j)] = j > i;
        in.attn_mask = TorchMask{causal.data(), true, {L, Sk}};
        const MhaGradients want = layer.backward(ctx, in, {dy.data(), {L, N, E}}, {.impl = Impl::unfused});

        const MhaLayer device_layer(ctx, layer);
        const DeviceTensor x_q = device_of(ctx, query, DType::f32, {1, L, N, E});
        const DeviceTensor x_k = self ? x_q : device_of(ctx, key, DType::f32, {1, S, N, kd});
        const DeviceTensor x_v = self ? x_q : device_of(ctx, value, DType::f32, {1, S, N, vd});
        const DeviceTensor d_y = device_of(ctx, dy, DType::f32, {1, L, N, E});
        MhaLayerGradients g{.query = zeros({1, L, N, E})};
        if (!self) {
            g.key = zeros({1, S, N, kd});
            g.value = zeros({1, S, N, vd});
        }
        const std::int64_t in_features[4] = {E, kd, vd, E};
        for (int i = 0; i < 4; ++i) {
            g.weight[i] = zeros({1, 1, E, in_features[i]});
            g.bias[i] = zeros({1, 1, 1, E});
        }
        Batch batch(ctx);
        device_layer.backward(batch, x_q, x_k, x_v, d_y, g, options);
        batch.submit().wait();
        const Tolerance exact{0.0, 0.0};
        auto expect = [&](const DeviceTensor& t, const std::vector<float>& values, const std::string& what) {
            const Comparison c = compare(host_of(t), {values.begin(), values.end()}, exact);
            INFO(what << ": " << c.message);
            CHECK(c.ok);
        };
        expect(g.query, want.query, "query");
        if (!self) {
            expect(g.key, want.key, "key");
            expect(g.value, want.value, "value");
        }
        // The parameters, from MhaGradients' state_dict() names.
        const MhaGradients::Parameter* out_w = want.find("out_proj.weight");
        const MhaGradients::Parameter* out_b = want.find("out_proj.bias");
        REQUIRE(out_w != nullptr);
        REQUIRE(out_b != nullptr);
        expect(g.weight[3], out_w->values, "out_proj.weight");
        expect(g.bias[3], out_b->values, "out_proj.bias");
        const MhaGradients::Parameter* in_b = want.find("in_proj_bias");
        REQUIRE(in_b != nullptr);
        for (int i = 0; i < 3; ++i) {
            const auto from = in_b->values.begin() + i * E;
            expect(g.bias[i], {from, from + E}, "in_proj_bias part " + std::to_string(i));
            if (self) {
                const auto w0 = want.find("in_proj_weight")->values.begin() + i * E * E;
                expect(g.weight[i], {w0, w0 + E * E}, "in_proj_weight part " + std::to_string(i));
            } else {
                const char* names[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
                expect(g.weight[i], want.find(names[i])->values, names[i]);
            }
        }

        // Refusals, by the argument's name, before anything is recorded.
        auto refusal = [&](const DeviceTensor& dy_arg, const MhaLayerGradients& grads) {
            Batch b(ctx);
            try {
                device_layer.backward(b, x_q, x_k, x_v, dy_arg, grads, options);
            } catch (const InvalidArgument& e) {
                return e.argument();
            }
            return std::string("<accepted>");
        };
        CHECK(refusal(x_q, g) == "<accepted>");
        CHECK(refusal(device_of(ctx, dy, DType::f32, {1, N, L, E}), g) == "grad_out");
        MhaLayerGradients bad = g;
        bad.weight[1] = zeros({1, 1, E, kd + 1});
        CHECK(refusal(d_y, bad) == "grads.weight[k]");
        bad = g;
        bad.bias[3] = {};
        CHECK(refusal(d_y, bad) == "grads.bias[out]");
        bad = g;
        if (self) bad.key = zeros({1, L, N, E});  // the key is the query's tensor
        else bad.value = {};
        CHECK(refusal(d_y, bad) == (self ? "grads.key" : "grads.value"));
    }
    CHECK(test::take_validation_messages(ctx).empty());
}

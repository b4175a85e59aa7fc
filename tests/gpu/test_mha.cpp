// The multi-head attention module: the GPU layer against the CPU reference of the whole layer over
// random layers (self/cross, kdim/vdim != embed_dim, with and without bias, packed or separate
// weights, batch_first, unbatched, every PyTorch mask form, weights averaged or per head, every
// path, fp32 and fp16), and both against the outputs PyTorch itself computed (tests/fixtures/mha).
#include "support/catch.hpp"

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "mha_weights.hpp"
#include "npy.hpp"
#include "state_dict.hpp"
#include "support/expect_case.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::test;
using namespace vkattn::testing;
namespace fs = std::filesystem;

namespace {

struct LayerCase {
    std::int64_t E = 16, H = 4, kdim = 0, vdim = 0, L = 5, S = 7, N = 2;  // kdim, vdim 0: E
    bool bias = true, packed = true, batch_first = false, batched = true, self = true;
    std::string kpm = "none", am = "none";  // kpm: none/bool/float; am: none/bool2/float2/bool3/float3
    bool need_weights = false, average = true;
    Impl impl = Impl::automatic;
    DType dtype = DType::f32;

    std::string describe() const {
        std::ostringstream s;
        s << "E=" << E << " H=" << H << " kdim=" << kdim << " vdim=" << vdim << " L=" << L << " S=" << S << " N=" << N
          << " bias=" << bias << " packed=" << packed << " batch_first=" << batch_first << " batched=" << batched
          << " self=" << self << " kpm=" << kpm << " am=" << am << " need_weights=" << need_weights
          << " average=" << average << " impl=" << to_string(impl) << " dtype=" << to_string(dtype);
        return s.str();
    }
};

std::vector<std::int64_t> seq_shape(const LayerCase& c, std::int64_t T, std::int64_t features) {
    if (!c.batched) return {T, features};
    return c.batch_first ? std::vector<std::int64_t>{c.N, T, features} : std::vector<std::int64_t>{T, c.N, features};
}

void expect_layer(LayerCase c, unsigned seed) {
    if (c.kdim == 0) c.kdim = c.E;
    if (c.vdim == 0) c.vdim = c.E;
    if (c.self) c.S = c.L;  // the keys are the queries
    INFO("seed " << seed << ": " << c.describe());
    std::mt19937 rng(seed);
    const float w_amp = 1.0f / std::sqrt(static_cast<float>(c.E));
    std::vector<float> in_proj, wq, wk, wv, in_bias, wo, bo;
    MhaWeights w;
    if (c.packed) {
        in_proj = random_values(rng, 3 * c.E * c.E, w_amp);
        w.in_proj_weight = in_proj;
    } else {
        wq = random_values(rng, c.E * c.E, w_amp);
        wk = random_values(rng, c.E * c.kdim, w_amp);
        wv = random_values(rng, c.E * c.vdim, w_amp);
        w.q_proj_weight = wq;
        w.k_proj_weight = wk;
        w.v_proj_weight = wv;
    }
    wo = random_values(rng, c.E * c.E, w_amp);
    w.out_proj_weight = wo;
    if (c.bias) {
        in_bias = random_values(rng, 3 * c.E, 0.5f);
        bo = random_values(rng, c.E, 0.5f);
        w.in_proj_bias = in_bias;
        w.out_proj_bias = bo;
    }
    const MultiHeadAttention layer({.embed_dim = c.E, .num_heads = c.H, .kdim = c.kdim, .vdim = c.vdim, .bias = c.bias,
                                    .batch_first = c.batch_first},
                                   w);
    const std::int64_t N = c.batched ? c.N : 1;
    const auto query = random_values(rng, N * c.L * c.E, 1.5f);
    const auto key = random_values(rng, N * c.S * c.kdim, 1.5f);
    const auto value = random_values(rng, N * c.S * c.vdim, 1.5f);
    MhaInputs in{.query = {query.data(), seq_shape(c, c.L, c.E)}};
    if (!c.self) {
        in.key = {key.data(), seq_shape(c, c.S, c.kdim)};
        in.value = {value.data(), seq_shape(c, c.S, c.vdim)};
    }
    std::bernoulli_distribution blocked(0.25);
    std::uniform_real_distribution<float> added(-2.0f, 1.0f);
    std::vector<std::uint8_t> kpm_bool, am_bool;
    std::vector<float> kpm_float, am_float;
    if (c.kpm == "bool") {
        for (std::int64_t i = 0; i < N * c.S; ++i) kpm_bool.push_back(blocked(rng));
        in.key_padding_mask = TorchMask{kpm_bool.data(), true, c.batched ? std::vector<std::int64_t>{N, c.S} : std::vector<std::int64_t>{c.S}};
    } else if (c.kpm == "float") {
        for (std::int64_t i = 0; i < N * c.S; ++i) kpm_float.push_back(blocked(rng) ? -INFINITY : added(rng));
        in.key_padding_mask = TorchMask{kpm_float.data(), false, c.batched ? std::vector<std::int64_t>{N, c.S} : std::vector<std::int64_t>{c.S}};
    }
    if (c.am != "none") {
        const bool per_head = c.am.back() == '3';
        const std::vector<std::int64_t> shape = per_head ? std::vector<std::int64_t>{N * c.H, c.L, c.S} : std::vector<std::int64_t>{c.L, c.S};
        const std::int64_t n = per_head ? N * c.H * c.L * c.S : c.L * c.S;
        if (c.am.rfind("bool", 0) == 0) {
            for (std::int64_t i = 0; i < n; ++i) am_bool.push_back(blocked(rng));
            in.attn_mask = TorchMask{am_bool.data(), true, shape};
        } else {
            for (std::int64_t i = 0; i < n; ++i) am_float.push_back(blocked(rng) ? -INFINITY : added(rng));
            in.attn_mask = TorchMask{am_float.data(), false, shape};
        }
    }
    const std::int64_t weights_count = c.average ? N * c.L * c.S : N * c.H * c.L * c.S;
    std::vector<float> out(static_cast<std::size_t>(N * c.L * c.E), NAN), ref_out(out.size(), NAN);
    std::vector<float> weights(c.need_weights ? static_cast<std::size_t>(weights_count) : 0, NAN), ref_weights(weights.size(), NAN);
    const MhaOptions options{.average_attn_weights = c.average, .dtype = c.dtype, .impl = c.impl};
    const MhaReport report = layer.forward(gpu_context(), in, {out.data(), c.need_weights ? weights.data() : nullptr}, options);
    reference_multi_head_attention(layer, in, {ref_out.data(), c.need_weights ? ref_weights.data() : nullptr}, options);
    INFO("ran " << report.attention.variant);
    const Comparison o = compare({out.begin(), out.end()}, {ref_out.begin(), ref_out.end()}, tolerance_for(c.dtype));
    INFO("out: " << o.message);
    CHECK(o.ok);
    if (c.need_weights) {
        const Comparison wc = compare({weights.begin(), weights.end()}, {ref_weights.begin(), ref_weights.end()},
                                      tolerance_for(c.dtype == DType::f32 ? DType::f32 : DType::f16));
        INFO("weights: " << wc.message);
        CHECK(wc.ok);
    }
    if (c.impl != Impl::automatic) CHECK(report.attention.path == c.impl);
    CHECK(report.flops > 0);
    const std::string messages = take_validation_messages(gpu_context());
    INFO(messages);
    CHECK(messages.empty());
}

}  // namespace

TEST_CASE("mha: every layer shape with every PyTorch mask form against the CPU layer", "[gpu][mha]") {
    const int shape = GENERATE(range(0, 5));
    const std::string kpm = GENERATE("none", "bool", "float");
    const std::string am = GENERATE("none", "bool2", "float2", "bool3", "float3");
    LayerCase c;
    switch (shape) {
        case 0: break;  // self-attention, packed, bias, sequence first
        case 1: c.self = false; c.packed = false; c.kdim = 6; c.vdim = 10; c.H = 2; c.S = 9; break;  // cross, kdim != vdim
        case 2: c.E = 12; c.H = 3; c.bias = false; c.self = false; c.L = 4; c.S = 11; break;           // no bias, packed cross
        case 3: c.E = 8; c.H = 2; c.batch_first = true; c.N = 3; break;                                  // batch_first
        case 4: c.E = 8; c.H = 1; c.batched = false; c.packed = false; break;                            // unbatched, separate
    }
    c.kpm = kpm;
    c.am = am;
    // Cycle the weights request and the path through the matrix (the weights need the three-stage path).
    const int k = shape * 15 + (kpm == "bool" ? 5 : kpm == "float" ? 10 : 0) + static_cast<int>(am.size() % 5);
    c.need_weights = k % 3 != 0;
    c.average = k % 3 == 1;
    c.impl = c.need_weights ? (k % 2 ? Impl::unfused : Impl::automatic) : (k % 2 ? Impl::fused : Impl::split);
    expect_layer(c, fresh_seed());
}

TEST_CASE("mha: fp16 and bf16 storage in every path", "[gpu][mha]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    const DType dtype = GENERATE(DType::f16, DType::bf16);
    LayerCase c;
    c.E = 32;
    c.H = 4;
    c.L = 19;
    c.S = 23;
    c.self = false;
    c.kpm = "bool";
    c.am = "float2";
    c.dtype = dtype;
    c.impl = impl;
    c.need_weights = impl == Impl::unfused;
    expect_layer(c, fresh_seed());
}

TEST_CASE("mha: features not 4-aligned take the scalar projections", "[gpu][mha]") {
    LayerCase c;
    c.E = 6;
    c.H = 2;
    c.kdim = 5;
    c.vdim = 7;
    c.packed = false;
    c.self = false;
    c.impl = GENERATE(Impl::unfused, Impl::fused);
    c.need_weights = c.impl == Impl::unfused;
    c.average = false;
    expect_layer(c, fresh_seed());
}

TEST_CASE("mha: bad configurations and inputs name the PyTorch argument", "[gpu][mha]") {
    std::vector<float> w(3 * 16 * 16, 0.1f), o(16 * 16, 0.1f), b(48, 0.0f), ob(16, 0.0f);
    const MhaWeights weights{.in_proj_weight = w, .in_proj_bias = b, .out_proj_weight = o, .out_proj_bias = ob};
    auto argument = [](auto&& f) {
        try {
            f();
        } catch (const InvalidArgument& e) {
            return e.argument();
        }
        return std::string("<accepted>");
    };
    CHECK(argument([&] { MultiHeadAttention({.embed_dim = 16, .num_heads = 3}, weights); }) == "embed_dim");
    CHECK(argument([&] { MultiHeadAttention({.embed_dim = 16, .num_heads = 4, .bias = false}, weights); }) == "in_proj_bias");
    const MhaWeights short_out{.in_proj_weight = w, .in_proj_bias = b, .out_proj_weight = std::span(o).first(10), .out_proj_bias = ob};
    CHECK(argument([&] { MultiHeadAttention({.embed_dim = 16, .num_heads = 4}, short_out); }) == "out_proj.weight");
    CHECK(argument([&] { MultiHeadAttention({.embed_dim = 16, .num_heads = 4, .kdim = 8}, weights); }) == "in_proj_weight");

    const MultiHeadAttention layer({.embed_dim = 16, .num_heads = 4}, weights);
    std::vector<float> x(2 * 5 * 16, 0.5f), out(x.size());
    std::vector<std::uint8_t> mask(2 * 9, 0);
    auto forward = [&](MhaInputs in) { return argument([&] { layer.forward(gpu_context(), in, {out.data()}); }); };
    CHECK(forward({.query = {x.data(), {5, 2, 16}}}) == "<accepted>");
    CHECK(forward({.query = {x.data(), {5, 2, 15}}}) == "query");
    CHECK(forward({.query = {x.data(), {2, 5, 2, 8}}}) == "query");
    CHECK(forward({.query = {x.data(), {5, 2, 16}}, .key = {x.data(), {5, 1, 16}}, .value = {x.data(), {5, 1, 16}}}) == "key");
    CHECK(forward({.query = {x.data(), {5, 2, 16}}, .key = {x.data(), {5, 2, 16}}, .value = {x.data(), {4, 2, 16}}}) == "value");
    CHECK(forward({.query = {x.data(), {5, 2, 16}}, .key_padding_mask = TorchMask{mask.data(), true, {2, 9}}}) == "key_padding_mask");
    CHECK(forward({.query = {x.data(), {5, 2, 16}}, .attn_mask = TorchMask{mask.data(), true, {3, 5}}}) == "attn_mask");
    CHECK(argument([&] { layer.forward(gpu_context(), {.query = {x.data(), {5, 2, 16}}}, {nullptr}); }) == "out");
}

namespace {

npy::Array read_npy(const fs::path& p) { return npy::read(p); }

std::vector<double> as_doubles(const npy::Array& a) {
    return {a.as<float>(), a.as<float>() + a.count()};
}

}  // namespace

TEST_CASE("mha: PyTorch nn.MultiheadAttention fixtures, weights from .npy files and .safetensors", "[gpu][mha][torch]") {
    const fs::path root = fs::path(VKATTN_FIXTURES) / "mha" / "data";
    REQUIRE(fs::is_directory(root));
    int cases = 0;
    for (const auto& entry : fs::directory_iterator(root)) {
        const fs::path dir = entry.path();
        std::ifstream json_file(dir / "case.json");
        const auto meta = nlohmann::json::parse(json_file);
        INFO("fixture " << dir.filename().string());
        const npy::Array query = read_npy(dir / "query.npy"), key = read_npy(dir / "key.npy"), value = read_npy(dir / "value.npy");
        const npy::Array expected = read_npy(dir / "out.npy");
        MhaInputs in{.query = {query.as<float>(), query.shape}, .key = {key.as<float>(), key.shape},
                     .value = {value.as<float>(), value.shape}};
        npy::Array kpm, am;
        if (fs::exists(dir / "key_padding_mask.npy")) {
            kpm = read_npy(dir / "key_padding_mask.npy");
            in.key_padding_mask = TorchMask{kpm.data.data(), kpm.type == npy::ElementType::boolean, kpm.shape};
        }
        if (fs::exists(dir / "attn_mask.npy")) {
            am = read_npy(dir / "attn_mask.npy");
            in.attn_mask = TorchMask{am.data.data(), am.type == npy::ElementType::boolean, am.shape};
        }
        const bool need_weights = meta["need_weights"].get<bool>();
        const MhaOptions options{.average_attn_weights = meta["average_attn_weights"].get<bool>(),
                                 .impl = need_weights ? Impl::unfused : Impl::fused};
        for (const char* source : {"weights", "weights.safetensors"}) {
            INFO("weights from " << source);
            const MhaStateDict sd = mha_from_state_dict(load_state_dict(dir / source), meta["num_heads"].get<std::int64_t>(),
                                                        meta["batch_first"].get<bool>());
            CHECK(sd.config.embed_dim == meta["embed_dim"].get<std::int64_t>());
            CHECK(sd.config.bias == meta["bias"].get<bool>());
            const MultiHeadAttention layer(sd.config, sd.weights);
            std::vector<float> out(static_cast<std::size_t>(expected.count()), NAN), ref_out(out.size(), NAN);
            npy::Array expected_weights;
            std::vector<float> weights, ref_weights;
            if (need_weights) {
                expected_weights = read_npy(dir / "attn_weights.npy");
                weights.assign(static_cast<std::size_t>(expected_weights.count()), NAN);
                ref_weights = weights;
            }
            layer.forward(gpu_context(), in, {out.data(), need_weights ? weights.data() : nullptr}, options);
            reference_multi_head_attention(layer, in, {ref_out.data(), need_weights ? ref_weights.data() : nullptr}, options);
            for (const auto* got : {&out, &ref_out}) {
                const Comparison c = compare({got->begin(), got->end()}, as_doubles(expected), tolerance_for(DType::f32));
                INFO((got == &out ? "GPU" : "CPU reference") << " vs PyTorch out: " << c.message);
                CHECK(c.ok);
            }
            if (need_weights)
                for (const auto* got : {&weights, &ref_weights}) {
                    const Comparison c = compare({got->begin(), got->end()}, as_doubles(expected_weights), tolerance_for(DType::f32));
                    INFO((got == &weights ? "GPU" : "CPU reference") << " vs PyTorch attn_weights: " << c.message);
                    CHECK(c.ok);
                }
        }
        ++cases;
    }
    CHECK(cases >= 8);
    CHECK(take_validation_messages(gpu_context()).empty());
}

// The multi-head layer's backward: the GPU's gradients and the CPU reference's against PyTorch
// autograd's (tests/fixtures/mha: float64 autograd over the same layers and inputs), and the GPU's
// against the reference over random layers (self/cross, kdim/vdim, bias or not, inputs shared,
// masks, dropout, both attention paths, f32/f16/bf16).
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

std::vector<double> doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Every gradient of `got` against `want`'s: the same inputs' and parameters' names and sizes.
void expect_gradients(const MhaGradients& got, const MhaGradients& want, Tolerance tolerance, const char* what) {
    INFO(what);
    for (const auto& [g, w, name] : {std::tuple{&got.query, &want.query, "query"}, std::tuple{&got.key, &want.key, "key"},
                                     std::tuple{&got.value, &want.value, "value"}}) {
        INFO(name);
        REQUIRE(g->size() == w->size());
        if (g->empty()) continue;
        const Comparison c = compare(doubles(*g), doubles(*w), tolerance);
        INFO(c.message);
        CHECK(c.ok);
    }
    REQUIRE(got.parameters.size() == want.parameters.size());
    for (const MhaGradients::Parameter& w : want.parameters) {
        INFO(w.name);
        const MhaGradients::Parameter* g = got.find(w.name);
        REQUIRE(g != nullptr);
        CHECK(g->shape == w.shape);
        REQUIRE(g->values.size() == w.values.size());
        const Comparison c = compare(doubles(g->values), doubles(w.values), tolerance);
        INFO(c.message);
        CHECK(c.ok);
    }
}

// PyTorch's gradients of one fixture, in MhaGradients' form.
MhaGradients torch_gradients(const fs::path& dir, const MultiHeadAttention& layer, bool self) {
    auto read = [&](const std::string& name) {
        const npy::Array a = npy::read(dir / "grads" / (name + ".npy"));
        return std::pair{a.shape, std::vector<float>(a.as<float>(), a.as<float>() + a.count())};
    };
    MhaGradients g;
    g.query = read("query").second;
    if (!self) {
        g.key = read("key").second;
        g.value = read("value").second;
    }
    const MhaConfig& c = layer.config();
    std::vector<std::string> names;
    if (c.kdim == c.embed_dim && c.vdim == c.embed_dim) names = {"in_proj_weight"};
    else names = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
    if (c.bias) names.push_back("in_proj_bias");
    names.push_back("out_proj.weight");
    if (c.bias) names.push_back("out_proj.bias");
    for (const std::string& name : names) {
        auto [shape, values] = read(name);
        g.parameters.push_back({name, shape, values});
    }
    return g;
}

}  // namespace

TEST_CASE("mha backward: PyTorch autograd's gradients of nn.MultiheadAttention fixtures", "[gpu][mha][backward][torch]") {
    const fs::path root = fs::path(VKATTN_FIXTURES) / "mha" / "data";
    int cases = 0;
    for (const auto& entry : fs::directory_iterator(root)) {
        const fs::path dir = entry.path();
        std::ifstream json_file(dir / "case.json");
        const auto meta = nlohmann::json::parse(json_file);
        INFO("fixture " << dir.filename().string());
        const bool self = meta["self_attention"].get<bool>();
        const npy::Array query = npy::read(dir / "query.npy"), key = npy::read(dir / "key.npy"),
                         value = npy::read(dir / "value.npy"), grad_out = npy::read(dir / "grad_out.npy");
        // Self-attention passes one tensor (PyTorch's query is key is value): its gradient is the sum.
        MhaInputs in{.query = {query.as<float>(), query.shape}};
        if (!self) {
            in.key = {key.as<float>(), key.shape};
            in.value = {value.as<float>(), value.shape};
        }
        npy::Array kpm, am;
        if (fs::exists(dir / "key_padding_mask.npy")) {
            kpm = npy::read(dir / "key_padding_mask.npy");
            in.key_padding_mask = TorchMask{kpm.data.data(), kpm.type == npy::ElementType::boolean, kpm.shape};
        }
        if (fs::exists(dir / "attn_mask.npy")) {
            am = npy::read(dir / "attn_mask.npy");
            in.attn_mask = TorchMask{am.data.data(), am.type == npy::ElementType::boolean, am.shape};
        }
        const MhaStateDict sd = mha_from_state_dict(load_state_dict(dir / "weights"), meta["num_heads"].get<std::int64_t>(),
                                                    meta["batch_first"].get<bool>());
        const MultiHeadAttention layer(sd.config, sd.weights);
        const MhaGradients want = torch_gradients(dir, layer, self);
        const HostArray dy{grad_out.as<float>(), grad_out.shape};
        for (const Impl impl : {Impl::fused, Impl::unfused}) {
            INFO("impl " << to_string(impl));
            const MhaGradients got = layer.backward(gpu_context(), in, dy, {.impl = impl});
            expect_gradients(got, want, gradient_tolerance_for(DType::f32), "GPU vs PyTorch");
            CHECK(got.report.attention.path == impl);
            CHECK(got.report.gpu_ms > 0);
        }
        expect_gradients(reference_multi_head_attention_backward(layer, in, dy), want, gradient_tolerance_for(DType::f32),
                         "CPU reference vs PyTorch");
        ++cases;
    }
    CHECK(cases >= 9);
    CHECK(take_validation_messages(gpu_context()).empty());
}

namespace {

struct BackwardCase {
    std::int64_t E = 16, H = 4, kdim = 0, vdim = 0, L = 5, S = 7, N = 2;
    bool bias = true, batch_first = false, batched = true;
    std::string inputs = "cross";  // self (one tensor), cross, shared_kv (value is the key), reshaped
    std::string kpm = "none", am = "none";
    double dropout = 0.0;
    Impl impl = Impl::fused;
    DType dtype = DType::f32;
};

void expect_backward(BackwardCase c, unsigned seed) {
    if (c.kdim == 0) c.kdim = c.E;
    if (c.vdim == 0) c.vdim = c.E;
    if (c.inputs == "self") c.S = c.L, c.kdim = c.vdim = c.E;
    if (c.inputs == "shared_kv") c.vdim = c.kdim;
    if (c.inputs == "reshaped") c.kdim = c.E / 2, c.S = 2 * c.L;  // the key is the query's data in another shape
    INFO("seed " << seed << " E=" << c.E << " H=" << c.H << " kdim=" << c.kdim << " vdim=" << c.vdim << " L=" << c.L
                 << " S=" << c.S << " N=" << c.N << " bias=" << c.bias << " batch_first=" << c.batch_first << " batched="
                 << c.batched << " inputs=" << c.inputs << " kpm=" << c.kpm << " am=" << c.am << " dropout=" << c.dropout
                 << " impl=" << to_string(c.impl) << " dtype=" << to_string(c.dtype));
    std::mt19937 rng(seed);
    const float amp = 1.0f / std::sqrt(static_cast<float>(c.E));
    const auto wq = random_values(rng, c.E * c.E, amp), wk = random_values(rng, c.E * c.kdim, amp),
               wv = random_values(rng, c.E * c.vdim, amp), wo = random_values(rng, c.E * c.E, amp);
    const auto in_bias = random_values(rng, 3 * c.E, 0.5f), bo = random_values(rng, c.E, 0.5f);
    MhaWeights w{.q_proj_weight = wq, .k_proj_weight = wk, .v_proj_weight = wv, .out_proj_weight = wo};
    if (c.bias) {
        w.in_proj_bias = in_bias;
        w.out_proj_bias = bo;
    }
    const MultiHeadAttention layer({.embed_dim = c.E, .num_heads = c.H, .kdim = c.kdim, .vdim = c.vdim, .bias = c.bias,
                                    .batch_first = c.batch_first},
                                   w);
    const std::int64_t N = c.batched ? c.N : 1;
    auto shape = [&](std::int64_t T, std::int64_t f) {
        if (!c.batched) return std::vector<std::int64_t>{T, f};
        return c.batch_first ? std::vector<std::int64_t>{N, T, f} : std::vector<std::int64_t>{T, N, f};
    };
    const auto query = random_values(rng, N * c.L * c.E, 1.5f), key = random_values(rng, N * c.S * c.kdim, 1.5f),
               value = random_values(rng, N * c.S * c.vdim, 1.5f), dy = random_values(rng, N * c.L * c.E, 1.0f);
    MhaInputs in{.query = {query.data(), shape(c.L, c.E)}};
    if (c.inputs != "self") {
        in.key = {c.inputs == "reshaped" ? query.data() : key.data(), shape(c.S, c.kdim)};
        in.value = {c.inputs == "shared_kv" ? key.data() : value.data(), shape(c.S, c.vdim)};
    }
    std::vector<std::uint8_t> kpm;
    std::vector<float> am;
    std::bernoulli_distribution blocked(0.25);
    if (c.kpm == "bool") {
        for (std::int64_t i = 0; i < N * c.S; ++i) kpm.push_back(i % c.S != 0 && blocked(rng));
        in.key_padding_mask = TorchMask{kpm.data(), true, c.batched ? std::vector<std::int64_t>{N, c.S} : std::vector<std::int64_t>{c.S}};
    }
    if (c.am == "float3") {
        am = random_values(rng, N * c.H * c.L * c.S, 1.0f);
        in.attn_mask = TorchMask{am.data(), false, {N * c.H, c.L, c.S}};
    }
    const MhaOptions options{.dtype = c.dtype, .impl = c.impl, .dropout = c.dropout, .seed = 7};
    const HostArray grad_out{dy.data(), shape(c.L, c.E)};
    const MhaGradients got = layer.backward(gpu_context(), in, grad_out, options);
    const MhaGradients want = reference_multi_head_attention_backward(layer, in, grad_out, options);
    CHECK(got.query.size() == query.size());
    CHECK(got.key.empty() == (c.inputs == "self"));
    CHECK(got.value.empty() == (c.inputs == "self" || c.inputs == "shared_kv"));
    expect_gradients(got, want, gradient_tolerance_for(c.dtype), "GPU vs CPU reference");
    CHECK(got.report.attention.path == c.impl);
    const std::string messages = take_validation_messages(gpu_context());
    INFO(messages);
    CHECK(messages.empty());
}

}  // namespace

TEST_CASE("mha backward: random layers against the CPU reference", "[gpu][mha][backward]") {
    const int which = GENERATE(range(0, 10));
    BackwardCase c;
    switch (which) {
        case 0: break;
        case 1: c.inputs = "self", c.kpm = "bool", c.batch_first = true; break;
        case 2: c.inputs = "shared_kv", c.kdim = 12, c.bias = false, c.am = "float3"; break;
        case 3: c.kdim = 6, c.vdim = 10, c.E = 24, c.H = 3, c.L = 9, c.S = 13, c.impl = Impl::unfused; break;
        case 4: c.batched = false, c.inputs = "self", c.dropout = 0.25; break;
        case 5: c.dtype = DType::f16, c.L = 33, c.S = 17, c.kpm = "bool"; break;
        case 6: c.dtype = DType::bf16, c.inputs = "self", c.E = 32, c.H = 2, c.L = 20; break;
        case 7: c.E = 64, c.H = 4, c.L = 65, c.S = 63, c.N = 3, c.am = "float3", c.impl = Impl::unfused; break;
        case 8: c.dropout = 0.1, c.kdim = 7, c.impl = Impl::unfused, c.dtype = DType::f16; break;
        case 9: c.inputs = "reshaped"; break;  // one pointer, two shapes: two inputs, two gradients
    }
    expect_backward(c, 100u + static_cast<unsigned>(which));
}

TEST_CASE("mha backward: a bad grad_out is refused by name before any GPU work", "[gpu][mha][backward]") {
    const std::vector<float> w(16 * 16 * 3, 0.1f), wo(16 * 16, 0.1f), b(48, 0.0f), bo(16, 0.0f), x(5 * 2 * 16, 1.0f);
    const MultiHeadAttention layer({.embed_dim = 16, .num_heads = 4},
                                   {.in_proj_weight = w, .in_proj_bias = b, .out_proj_weight = wo, .out_proj_bias = bo});
    const MhaInputs in{.query = {x.data(), {5, 2, 16}}};
    auto refusal = [](auto&& f) {
        try {
            f();
        } catch (const InvalidArgument& e) {
            return e.argument() + ": " + e.what();
        }
        return std::string("<accepted>");
    };
    const std::string wrong_shape = refusal([&] { layer.backward(gpu_context(), in, {x.data(), {5, 16}}); });
    CHECK_THAT(wrong_shape, Catch::StartsWith("grad_out") && Catch::Contains("[5, 2, 16]"));
    CHECK_THAT(refusal([&] { layer.backward(gpu_context(), in, {nullptr, {5, 2, 16}}); }), Catch::StartsWith("grad_out"));
    CHECK_THAT(refusal([&] { reference_multi_head_attention_backward(layer, in, {x.data(), {2, 5, 16}}); }),
               Catch::StartsWith("grad_out") && Catch::Contains("[5, 2, 16]"));
    CHECK(refusal([&] { layer.backward(gpu_context(), in, {x.data(), {5, 2, 16}}); }) == "<accepted>");
}

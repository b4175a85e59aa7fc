// The logits output (AttentionOutputs::logits, ONNX Attention's qk_matmul_output modes 0-2): the
// scores on their way to the softmax at each stage, written by the three-stage softmax beside P.
// Checked against the reference at every stage with every feature, and once by hand from q and k so
// that the reference and the kernels cannot share a mistake.
#include "support/catch.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "support/expect_case.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/random.hpp"

using namespace vkattn;
using namespace vkattn::test;
using namespace vkattn::testing;

namespace {

constexpr std::array kStages{LogitsStage::scaled, LogitsStage::softcapped, LogitsStage::masked};

// GQA, awkward sizes (no tile divides Nq, Nkv or D), softcap and every mask at once.
Case everything(LogitsStage stage, DType dtype) {
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = 13;
    c.Nkv = 45;
    c.Dk = 20;
    c.Dv = 12;
    c.dtype = dtype;
    c.layout = Layout::bnhd;
    c.impl = Impl::unfused;
    c.weights = false;
    c.logits = stage;
    c.softcap = 4.0;
    c.amplitude = 3.0f;
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;
    c.window = {.left = 20, .right = -1};
    c.bool_mask_shape = std::vector<std::int64_t>{c.B, 1, c.Nq, c.Nkv};
    c.float_mask_shape = std::vector<std::int64_t>{c.Hq, 1, c.Nkv};  // with −∞ entries
    c.alibi_max_bias = 8.0;
    return c;
}

}  // namespace

TEST_CASE("logits: every stage with every feature, against the reference", "[gpu][logits]") {
    const LogitsStage stage = GENERATE(from_range(kStages));
    const DType dtype = GENERATE(DType::f32, DType::f16, DType::bf16);
    INFO("stage " << to_string(stage) << ", " << to_string(dtype));
    expect_pass(everything(stage, dtype), Impl::unfused);

    // Each feature alone, and the outputs beside the logits: weights, lse, dropout's kept weights.
    Case plain = everything(stage, dtype);
    plain.softcap.reset();
    plain.causal = Causal::none;
    plain.kv_lengths = false;
    plain.window = {};
    plain.bool_mask_shape.reset();
    plain.float_mask_shape.reset();
    plain.alibi_max_bias.reset();
    plain.weights = true;
    expect_pass(plain, Impl::unfused);
    Case sinks_dropout = plain;
    sinks_dropout.sinks = true;
    sinks_dropout.dropout = 0.25;
    sinks_dropout.dropout_seed = 5;
    expect_pass(sinks_dropout, Impl::unfused);
    Case top_left = plain;
    top_left.causal = Causal::top_left;
    top_left.layout = Layout::bhnd;
    expect_pass(top_left, Impl::unfused);
}

TEST_CASE("logits: automatic takes the three-stage path for them; forced fused kernels refuse", "[gpu][logits]") {
    Case c = everything(LogitsStage::masked, DType::f32);
    c.impl = Impl::automatic;
    expect_pass(c, Impl::unfused);
    c.variant.texel_loads = false;  // the scalar loads write the same logits
    c.variant.subgroup_ops = false;
    expect_pass(c, Impl::unfused);

    Context& ctx = gpu_context();
    const HostTensor q = nan_tensor(DType::f32, Layout::bhnd, {1, 1, 2, 8});
    const HostTensor k = nan_tensor(DType::f32, Layout::bhnd, {1, 1, 3, 8});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 1, 2, 8});
    std::vector<float> logits(6);
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = k.view()};
    const AttentionOutputs out{.o = o.mutable_view(), .logits = logits.data()};
    for (const Impl impl : {Impl::fused, Impl::split})
        CHECK_THROWS_WITH(attention(ctx, in, out, {.impl = impl}),
                          Catch::StartsWith("impl: ") && Catch::Contains("logits") && Catch::Contains("three-stage"));
    CHECK_THROWS_WITH(attention(ctx, in, out, {.logits_stage = static_cast<LogitsStage>(7)}),
                      Catch::StartsWith("logits_stage: "));
    CHECK(take_validation_messages(ctx).empty());
}

TEST_CASE("logits: the stages by hand from q and k", "[gpu][logits]") {
    // One head, 3 queries, 5 keys: scaled = scale·q·k; softcapped = c·tanh(scaled / c); masked adds
    // the float mask and ALiBi's -slope·|i - j| and is −∞ at the bool mask's False, the key length
    // and the float mask's −∞.
    Context& ctx = gpu_context();
    std::mt19937 rng(17);
    const std::int64_t Nq = 3, Nkv = 5, D = 8;
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, 1, Nq, D}, 2.0f);
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, 1, Nkv, D}, 2.0f);
    const std::vector<std::uint8_t> allowed{1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1};
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> added{0.5f, -1.0f, 0.0f, -inf, 2.0f};
    const std::vector<std::int32_t> lengths{4};
    const std::vector<float> slopes{0.25f};
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = k.view(), .kv_lengths = lengths,
                             .bool_mask = MaskView{allowed.data(), {Nq, Nkv}},
                             .float_mask = MaskView{added.data(), {Nkv}}, .alibi_slopes = slopes};
    const double scale = 0.3, cap = 2.5;
    for (const LogitsStage stage : kStages) {
        HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 1, Nq, D});
        std::vector<float> logits(static_cast<std::size_t>(Nq * Nkv), std::numeric_limits<float>::quiet_NaN());
        attention(ctx, in, {.o = o.mutable_view(), .logits = logits.data()},
                  {.scale = scale, .softcap = cap, .logits_stage = stage});
        for (std::int64_t i = 0; i < Nq; ++i)
            for (std::int64_t j = 0; j < Nkv; ++j) {
                double dot = 0.0;
                for (std::int64_t d = 0; d < D; ++d) dot += q.at(0, 0, i, d) * k.at(0, 0, j, d);
                double want = scale * dot;
                if (stage != LogitsStage::scaled) want = cap * std::tanh(want / cap);
                const auto at = static_cast<std::size_t>(i * Nkv + j);
                if (stage == LogitsStage::masked) {
                    const bool visible = allowed[at] != 0 && j < lengths[0] && !std::isinf(added[static_cast<std::size_t>(j)]);
                    want = visible ? want + added[static_cast<std::size_t>(j)] - slopes[0] * std::abs(i - j) : -inf;
                }
                INFO(to_string(stage) << " (" << i << ", " << j << ")");
                if (std::isinf(want))
                    CHECK(logits[at] == -inf);
                else
                    CHECK(logits[at] == Approx(want).epsilon(1e-5).margin(1e-5));
            }
    }
    CHECK(take_validation_messages(ctx).empty());
}

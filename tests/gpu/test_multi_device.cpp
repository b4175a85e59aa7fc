// Head parallelism (vkattn/multi_device.hpp): one call over several contexts, here two more
// contexts on the same lavapipe device beside the suite's (the code path is a real multi-GPU one's:
// separate instances, queues and memory), and one context given twice. Every output against the CPU
// reference of the whole call, every feature at once (dropout's Philox numbers are the whole's).
#include "support/catch.hpp"

#include <cmath>
#include <limits>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

std::vector<Context*> contexts_of(std::initializer_list<int> which) {
    Context& second = test::suite_object([] { return Context(test::test_context_options()); });
    Context& third = test::suite_object([] { return Context(test::test_context_options()); });
    std::vector<Context*> all{&test::gpu_context(), &second, &third};
    std::vector<Context*> picked;
    for (const int i : which) picked.push_back(all[static_cast<std::size_t>(i)]);
    return picked;
}

std::string all_validation_messages() {
    std::string all;
    for (Context* c : contexts_of({0, 1, 2})) all += test::take_validation_messages(*c);
    return all;
}

struct Shape {
    std::int64_t B, Hq, Hkv;
};

void expect_like_one_device(const std::vector<Context*>& contexts, Shape s, Impl impl, DType dtype, unsigned seed) {
    const std::int64_t Nq = 13, Nkv = 37, D = 24;
    std::mt19937 rng(seed);
    const HostTensor q = random_tensor(rng, dtype, Layout::bnhd, {s.B, s.Hq, Nq, D});
    const HostTensor k = random_tensor(rng, dtype, Layout::bhnd, {s.B, s.Hkv, Nkv, D});
    const HostTensor v = random_tensor(rng, dtype, Layout::bnhd, {s.B, s.Hkv, Nkv, D});
    std::vector<std::int32_t> lengths;
    for (std::int64_t b = 0; b < s.B; ++b) lengths.push_back(static_cast<std::int32_t>(20 + 7 * b % 18));
    std::vector<std::uint8_t> allowed(static_cast<std::size_t>(s.B * Nq * Nkv));
    std::vector<float> added(static_cast<std::size_t>(s.Hq * Nkv));
    std::bernoulli_distribution keep(0.85);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (auto& a : allowed) a = keep(rng) ? 1 : 0;
    for (auto& a : added) a = uniform(rng);
    std::vector<float> sinks;
    for (std::int64_t h = 0; h < s.Hq; ++h) sinks.push_back(uniform(rng));
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .kv_lengths = lengths,
                             .bool_mask = MaskView{allowed.data(), {s.B, 1, Nq, Nkv}},
                             .float_mask = MaskView{added.data(), {s.Hq, 1, Nkv}}, .sinks = sinks};
    const bool three_stage = impl == Impl::unfused;
    AttentionOptions options{.causal = Causal::bottom_right, .window = {25, -1}, .softcap = 4.0,
                             .alibi_max_bias = 8.0, .dropout = 0.15, .seed = 77, .impl = impl};
    const auto rows = static_cast<std::size_t>(s.B * s.Hq * Nq);
    HostTensor o = nan_tensor(dtype, Layout::bnhd, {s.B, s.Hq, Nq, D});
    std::vector<float> lse(rows, NAN), weights(three_stage ? rows * Nkv : 0, NAN), logits(weights.size(), NAN);
    AttentionOutputs out{.o = o.mutable_view(), .lse = lse.data()};
    if (three_stage) {
        out.weights = weights.data();
        out.logits = logits.data();
    }
    const AttentionReport report = attention(contexts, in, out, options);
    CHECK(report.path == (impl == Impl::automatic ? report.path : impl));
    CHECK(report.flops > 0);

    HostTensor want = nan_tensor(dtype, Layout::bhnd, o.shape);
    std::vector<float> want_lse(rows), want_weights(weights.size()), want_logits(logits.size());
    reference_attention(in,
                        {.o = want.mutable_view(), .weights = three_stage ? want_weights.data() : nullptr,
                         .lse = want_lse.data(), .logits = three_stage ? want_logits.data() : nullptr},
                        options);
    const Comparison co = compare(o.doubles(), want.doubles(), tolerance_for(dtype));
    const Comparison cl = compare_lse({lse.begin(), lse.end()}, {want_lse.begin(), want_lse.end()});
    INFO("o: " << co.message << "\nlse: " << cl.message);
    CHECK(co.ok);
    CHECK(cl.ok);
    if (three_stage) {
        const Comparison cw = compare({weights.begin(), weights.end()}, {want_weights.begin(), want_weights.end()},
                                      tolerance_for(DType::f32));
        const Comparison cs = compare({logits.begin(), logits.end()}, {want_logits.begin(), want_logits.end()},
                                      tolerance_for(DType::f32));
        INFO("weights: " << cw.message << "\nlogits: " << cs.message);
        CHECK(cw.ok);
        CHECK(cs.ok);
    }
    CHECK(all_validation_messages().empty());
}

}  // namespace

TEST_CASE("multi-device: one call over several contexts equals the whole, every feature", "[gpu][multi_device]") {
    const Impl impl = GENERATE(Impl::unfused, Impl::fused, Impl::split, Impl::automatic);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    INFO(to_string(impl) << ", " << to_string(dtype));
    // 9 units over 2 contexts (5 + 4: a batch cut between them), over 3 with one given twice.
    expect_like_one_device(contexts_of({0, 1}), {3, 6, 3}, impl, dtype, 1);
    expect_like_one_device(contexts_of({1, 2, 1}), {3, 6, 3}, impl, dtype, 2);
    // Fewer units than contexts: one context idles.
    expect_like_one_device(contexts_of({0, 1, 2}), {1, 4, 2}, impl, dtype, 3);
}

TEST_CASE("multi-device: bad arguments are named before any device works", "[gpu][multi_device]") {
    const HostTensor q = nan_tensor(DType::f32, Layout::bhnd, {2, 2, 3, 8});
    const HostTensor k = nan_tensor(DType::f32, Layout::bhnd, {2, 2, 5, 8});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {2, 2, 3, 8});
    const std::vector<float> sentinel(o.f32.size(), 7.0f);
    o.f32 = sentinel;
    const AttentionInputs in{.q = q.view(), .k = k.view(), .v = k.view()};
    const AttentionOutputs out{.o = o.mutable_view()};
    CHECK_THROWS_WITH(attention(std::vector<Context*>{}, in, out), Catch::StartsWith("contexts: "));
    CHECK_THROWS_WITH(attention(std::vector<Context*>{&test::gpu_context(), nullptr}, in, out),
                      Catch::StartsWith("contexts: ") && Catch::Contains("1"));
    const std::vector<std::int32_t> too_long{5, 6};
    AttentionInputs bad = in;
    bad.kv_lengths = too_long;
    CHECK_THROWS_WITH(attention(contexts_of({0, 1}), bad, out), Catch::StartsWith("kv_lengths: "));
    CHECK_THROWS_WITH(attention(contexts_of({0, 1}), in, out, {.softcap = -1.0}), Catch::StartsWith("softcap: "));
    CHECK(o.f32 == sentinel);  // nothing written
    CHECK(all_validation_messages().empty());
}

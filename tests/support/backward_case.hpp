// The backward tests' cases (test_backward.cpp, test_coopmat_backward.cpp): a case's shape,
// features and options, its random inputs, the device's gradients against the CPU reference's
// (reference_attention_backward) by the one tolerance rule, and the feature cases every fused
// backward runs. Gradients are poisoned with NaN before every run (gpu_context), so an element a
// kernel forgets fails. A kernel whose products round their operands to f16
// (AttentionReport::product_type) is compared with the reference on the rounded inputs.
#pragma once

#include "support/catch.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/tuning.hpp"
#include "runtime.hpp"
#include "support/gpu_context.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/reference.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/rounded_operands.hpp"
#include "vkattn/testing/random.hpp"

namespace vkattn::test {

using vkattn::testing::HostTensor;

struct BackwardCase {
    std::string name;
    std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 65, Nkv = 63, Dk = 24, Dv = 24;
    DType dtype = DType::f32;
    std::optional<DType> k_dtype, v_dtype;  // default: dtype
    Layout layout = Layout::bhnd;
    AttentionOptions options;
    std::vector<std::int32_t> kv_lengths;
    std::optional<std::vector<std::int64_t>> bool_mask, float_mask;
    bool alibi = false, sinks = false;
    float amplitude = 1.0f;
    bool column_passes = false;  // the fused backward must take several column passes (its variant says so)
    bool loop_limited = false;   // run on loop_limited_context(): the cuts made for lavapipe's loop limit

    std::string describe() const {
        std::ostringstream s;
        s << name << ": B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " Nq=" << Nq << " Nkv=" << Nkv << " Dk=" << Dk
          << " Dv=" << Dv << " " << to_string(dtype) << " " << to_string(layout);
        return s.str();
    }
};

struct Gradients {
    HostTensor dq, dk, dv;
    std::vector<float> d_sinks, d_mask;
};

// Random inputs of a case; its gradients from `backward` (the device's or the reference's).
struct Inputs {
    HostTensor q, k, v, grad_out;
    std::vector<std::uint8_t> bool_mask;
    std::vector<float> float_mask, sinks, slopes;
    AttentionInputs in;

    Inputs(const BackwardCase& c, std::uint32_t seed) {
        std::mt19937 rng(seed);
        q = testing::random_tensor(rng, c.dtype, c.layout, {c.B, c.Hq, c.Nq, c.Dk}, c.amplitude);
        k = testing::random_tensor(rng, c.k_dtype.value_or(c.dtype), c.layout, {c.B, c.Hkv, c.Nkv, c.Dk}, c.amplitude);
        v = testing::random_tensor(rng, c.v_dtype.value_or(c.dtype), c.layout, {c.B, c.Hkv, c.Nkv, c.Dv});
        grad_out = testing::random_tensor(rng, c.dtype, c.layout, {c.B, c.Hq, c.Nq, c.Dv});
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        auto count = [](const std::vector<std::int64_t>& s) {
            std::size_t n = 1;
            for (const auto d : s) n *= static_cast<std::size_t>(d);
            return n;
        };
        in.q = q.view();
        in.k = k.view();
        in.v = v.view();
        in.kv_lengths = c.kv_lengths;
        if (c.bool_mask) {
            bool_mask.resize(count(*c.bool_mask));
            for (auto& m : bool_mask) m = unit(rng) < 0.6f ? 1 : 0;
            in.bool_mask = MaskView{bool_mask.data(), *c.bool_mask};
        }
        if (c.float_mask) {
            float_mask.resize(count(*c.float_mask));
            for (auto& x : float_mask) x = unit(rng);
            float_mask[0] = -std::numeric_limits<float>::infinity();
            in.float_mask = MaskView{float_mask.data(), *c.float_mask};
        }
        if (c.sinks) {
            sinks.resize(static_cast<std::size_t>(c.Hq));
            for (auto& x : sinks) x = 2.0f * unit(rng);
            sinks[1] = -std::numeric_limits<float>::infinity();  // a head without a sink
            in.sinks = sinks;
        }
        if (c.alibi) {
            slopes = alibi_slopes(c.Hq, 8.0);
            in.alibi_slopes = slopes;
        }
    }
};

// The gradients' views; d_sinks and d_float_mask where the case has sinks and a float mask.
inline AttentionGradients views(Gradients& g, bool sinks) {
    AttentionGradients out;
    out.dq = g.dq.mutable_view();
    out.dk = g.dk.mutable_view();
    out.dv = g.dv.mutable_view();
    if (sinks) out.d_sinks = g.d_sinks.data();
    if (!g.d_mask.empty()) out.d_float_mask = g.d_mask.data();
    return out;
}

inline Gradients gradients_like(const Inputs& in, const BackwardCase& c) {
    Gradients g;
    g.dq = in.q;
    g.dk = in.k;
    g.dv = in.v;
    g.d_sinks.assign(static_cast<std::size_t>(c.sinks ? c.Hq : 0), 7.0f);
    g.d_mask.assign(in.float_mask.size(), 7.0f);
    return g;
}

// dq, dk and dv of `got` against `want`'s, each within its tolerance (its storage type's).
inline void expect_close(const Gradients& got, const Gradients& want, testing::Tolerance dq, testing::Tolerance dk,
                  testing::Tolerance dv) {
    for (const auto& [g, w, tol, name] : {std::tuple{&got.dq, &want.dq, dq, "dq"}, std::tuple{&got.dk, &want.dk, dk, "dk"},
                                          std::tuple{&got.dv, &want.dv, dv, "dv"}}) {
        const testing::Comparison cmp = testing::compare(g->doubles(), w->doubles(), tol);
        INFO(name << ": " << cmp.message);
        CHECK(cmp.ok);
    }
}
inline void expect_close(const Gradients& got, const Gradients& want, testing::Tolerance tol) {
    expect_close(got, want, tol, tol, tol);
}

// The suite's context, but with the work cut as lavapipe's 65,535-iteration loop limit requires
// (ContextOptions::max_loop_iterations), so those cuts and refusals are tested on every device.
inline Context& loop_limited_context() {
    return test::suite_object([] {
        ContextOptions options = test::test_context_options();
        options.max_loop_iterations = 65535;
        return Context(options);
    });
}

// 3 queries over 120,000 keys (GQA 2/1, D 64, causal): past the fused dQ kernel's loop budget under
// lavapipe's 65,535 (loop_limited_context), where the heuristics take three stages.
inline BackwardCase long_keys_case(std::string name) {
    BackwardCase c;
    c.name = std::move(name);
    c.B = 1, c.Hq = 2, c.Hkv = 1, c.Nq = 3, c.Nkv = 120000, c.Dk = c.Dv = 64;
    c.options.causal = Causal::bottom_right;
    return c;
}

inline AttentionReport check_case(const BackwardCase& c, std::uint32_t seed) {
    INFO(c.describe() << " seed " << seed);
    const Inputs in(c, seed);
    Gradients ref = gradients_like(in, c), gpu = gradients_like(in, c);
    Context& context = c.loop_limited ? loop_limited_context() : test::gpu_context();
    const AttentionReport report = attention_backward(context, in.in, in.grad_out.view(), views(gpu, c.sinks), c.options);
    INFO(report.variant);
    // Products of 16-bit operands are checked on those operands (testing::rounded_backward_operands).
    const auto rounded = report.product_type != DType::f32
                             ? testing::rounded_backward_operands(in.in, in.grad_out.view(), report.product_type)
                             : std::nullopt;
    reference_attention_backward(rounded ? rounded->forward.inputs : in.in, rounded ? rounded->grad_out.view() : in.grad_out.view(),
                                 views(ref, c.sinks), c.options);
    const std::string messages = test::take_validation_messages(context);
    INFO(messages);
    CHECK(messages.empty());
    CHECK(report.path == (c.options.impl == Impl::unfused ? Impl::unfused : Impl::fused));
    if (c.column_passes && c.options.impl != Impl::unfused)  // BackwardConfig::describe()
        CHECK_THAT(report.variant, Catch::Contains("passes="));
    const testing::Tolerance tol = testing::gradient_tolerance_for(c.dtype, report.product_type);
    expect_close(gpu, ref, tol);
    // Per-head and per-mask-element sums: their Δ comes from the stored o, so the dtype's tolerance.
    for (const auto& [got, want, name] : {std::tuple{&gpu.d_sinks, &ref.d_sinks, "d_sinks"},
                                          std::tuple{&gpu.d_mask, &ref.d_mask, "d_float_mask"}}) {
        if (want->empty()) continue;
        const testing::Comparison cmp = testing::compare(std::vector<double>(got->begin(), got->end()),
                                                         std::vector<double>(want->begin(), want->end()), tol);
        INFO(name << ": " << cmp.message);
        CHECK(cmp.ok);
    }
    return report;
}

// The case run twice on the same inputs: the gradients (fp32 or f16, whichever the case stores) and
// the sinks' come out the same bits.
inline void expect_same_bits(const BackwardCase& c, std::uint32_t seed) {
    INFO(c.describe() << " seed " << seed);
    const Inputs in(c, seed);
    Gradients first = gradients_like(in, c), second = gradients_like(in, c);
    attention_backward(test::gpu_context(), in.in, in.grad_out.view(), views(first, c.sinks), c.options);
    attention_backward(test::gpu_context(), in.in, in.grad_out.view(), views(second, c.sinks), c.options);
    for (const auto& [a, b] : {std::pair{&first.dq, &second.dq}, std::pair{&first.dk, &second.dk}, std::pair{&first.dv, &second.dv}}) {
        REQUIRE_FALSE((a->f32.empty() && a->f16.empty()));  // values to compare
        CHECK(a->f32 == b->f32);
        CHECK(a->f16 == b->f16);
    }
    CHECK(first.d_sinks == second.d_sinks);
}

// SG, the lanes per subgroup the fused backward is built for on the suite's device, as the tuning
// chooses it (8 on lavapipe, 32 on NVIDIA; 8 where the fused backward cannot run, so that the
// three-stage path still gets its cases). A column pass covers at most 4 slots of 4 columns per lane.
inline std::int64_t backward_subgroup() {
    const auto& caps = detail::ContextAccess::runtime(test::gpu_context()).device().caps();
    detail::Problem p;  // SG depends on the device alone
    p.B = p.Hq = p.Hkv = p.Nq = p.Nkv = 1;
    p.Dk = p.Dv = 4;
    const std::array<std::int64_t, 4> dense{4, 4, 4, 1};
    const auto config = detail::choose_backward(caps, p, dense, dense, dense, dense, {}, nullptr);
    return config ? config->subgroup : 8;
}

inline std::vector<BackwardCase> feature_cases() {
    std::vector<BackwardCase> cases;
    auto add = [&](const std::string& name, auto&& tweak) {
        BackwardCase c;
        c.name = name;
        tweak(c);
        cases.push_back(c);
    };
    add("plain", [](BackwardCase&) {});
    add("causal top-left", [](BackwardCase& c) { c.options.causal = Causal::top_left; });
    add("causal bottom-right, key lengths", [](BackwardCase& c) {
        c.options.causal = Causal::bottom_right;
        c.kv_lengths = {63, 20};
    });
    add("causal offset", [](BackwardCase& c) { c.options.causal_offset = -5; });
    add("sliding window", [](BackwardCase& c) { c.options.window = {9, 3}; });
    add("window on a diagonal without causal, key lengths", [](BackwardCase& c) {
        c.options.window = {6, 2};
        c.options.diagonal_bottom_right = true;
        c.kv_lengths = {63, 40};
    });
    add("bool mask [B, 1, Nq, Nkv]", [](BackwardCase& c) { c.bool_mask = std::vector<std::int64_t>{2, 1, 65, 63}; });
    add("float mask [Hq, 1, Nkv]", [](BackwardCase& c) { c.float_mask = std::vector<std::int64_t>{4, 1, 63}; });
    add("softcap", [](BackwardCase& c) {
        c.options.softcap = 2.0;
        c.amplitude = 3.0f;
    });
    add("alibi", [](BackwardCase& c) { c.alibi = true; });
    add("sinks", [](BackwardCase& c) { c.sinks = true; });
    add("dropout", [](BackwardCase& c) {
        c.options.dropout = 0.25;
        c.options.seed = 77;
    });
    add("mqa, Dk != Dv, bnhd", [](BackwardCase& c) {
        c.Hq = 3, c.Hkv = 1, c.Dk = 28, c.Dv = 9;
        c.layout = Layout::bnhd;
    });
    // Two dispatches under lavapipe's loop limit (4,535 terms per dispatch at D = 24), one elsewhere:
    // the limit is imposed on every device.
    add("float mask [Nkv]: its gradient summed over B·Hq·Nq in two dispatches", [](BackwardCase& c) {
        c.loop_limited = true;
        c.Nq = 600, c.Nkv = 20, c.Dk = c.Dv = 24;
        c.float_mask = std::vector<std::int64_t>{20};
        c.options.causal = Causal::bottom_right;
        c.options.dropout = 0.2;
        c.options.seed = 9;
    });
    add("full float mask, softcap, alibi", [](BackwardCase& c) {
        c.float_mask = std::vector<std::int64_t>{2, 4, 65, 63};
        c.options.softcap = 3.0;
        c.alibi = true;
    });
    // A pass covers 16·SG columns (4 slots of 4 per lane): 32 more take a second pass, whatever the
    // device's subgroup size (Dk 160, Dv 136 on 8 lanes; 544 and 520 on 32).
    const std::int64_t wide = 16 * backward_subgroup() + 32;
    add("wide heads: two column passes", [wide](BackwardCase& c) {
        c.Nq = 20, c.Nkv = 33, c.Dk = wide, c.Dv = wide - 24;
        c.options.causal = Causal::bottom_right;
        c.column_passes = true;
    });
    add("storage-buffer words forced", [](BackwardCase& c) {
        c.options.variant.texel_loads = false;
        c.options.window = {5, 5};
    });
    add("everything", [](BackwardCase& c) {
        c.options.causal = Causal::bottom_right;
        c.kv_lengths = {50, 63};
        c.options.window = {30, 2};
        c.bool_mask = std::vector<std::int64_t>{65, 63};
        c.float_mask = std::vector<std::int64_t>{1, 4, 1, 63};
        c.options.softcap = 5.0;
        c.alibi = true;
        c.sinks = true;
        c.options.dropout = 0.1;
        c.options.seed = 3;
        c.options.scale = 0.3;
        c.layout = Layout::bnhd;
    });
    return cases;
}

}  // namespace vkattn::test

// One self-check case, shared by the test suite and `vk-attn check`: builds random inputs for a
// shape, runs the GPU and the CPU reference, and compares every output by the one tolerance rule.
// A failure's message holds the whole case and its seed, so it can be replayed.
#pragma once

#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/reference.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/rounded_operands.hpp"
#include "vkattn/testing/random.hpp"

namespace vkattn::testing {

struct Case {
    std::int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nkv = 1, Dk = 8, Dv = 8;
    DType dtype = DType::f32;  // q's and o's, and k's and v's unless given
    std::optional<DType> k_dtype, v_dtype;
    Layout layout = Layout::bhnd;
    Causal causal = Causal::none;
    bool kv_lengths = false;                          // random lengths in [0, Nkv]
    std::optional<std::vector<std::int64_t>> bool_mask_shape;
    std::optional<std::vector<std::int64_t>> float_mask_shape;
    bool weights = true, lse = true;
    std::optional<LogitsStage> logits;  // also returns the logits at this stage (three-stage path)
    std::optional<double> scale;
    float amplitude = 1.0f;  // of q and k: ~1e2 gives scores of ~1e4
    VariantOverrides variant;
    Impl impl = Impl::automatic;
    std::uint32_t splits = 0;
    // Model features (docs/SEMANTICS.md).
    std::optional<std::int64_t> causal_offset;
    Window window;
    std::optional<double> softcap;
    std::optional<double> alibi_max_bias;
    bool alibi_slopes = false;  // random slopes in [0.01, 1]
    bool sinks = false;         // random sink logits in [-1, 3]
    // fp8 k / v: random scales in [0.25, 4], per head (else none: scale 1).
    bool kv_scales = false;
    double dropout = 0.0;
    std::uint64_t dropout_seed = 0;

    std::string describe(unsigned seed) const {
        std::ostringstream s;
        s << "seed " << seed << ": B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " Nq=" << Nq << " Nkv=" << Nkv
          << " Dk=" << Dk << " Dv=" << Dv << " dtype=" << to_string(dtype) << " k_dtype=" << to_string(k_dtype.value_or(dtype))
          << " v_dtype=" << to_string(v_dtype.value_or(dtype)) << " layout=" << to_string(layout)
          << " causal=" << to_string(causal) << " kv_lengths=" << kv_lengths;
        auto shape = [&](const char* name, const std::optional<std::vector<std::int64_t>>& m) {
            if (!m) return;
            s << ' ' << name << "=[";
            for (std::size_t i = 0; i < m->size(); ++i) s << (i ? "," : "") << (*m)[i];
            s << ']';
        };
        shape("bool_mask", bool_mask_shape);
        shape("float_mask", float_mask_shape);
        s << " impl=" << to_string(impl) << " splits=" << splits << " amplitude=" << amplitude;
        if (scale) s << " scale=" << *scale;
        if (causal_offset) s << " causal_offset=" << *causal_offset;
        if (window.bounded()) s << " window=" << window.left << ',' << window.right;
        if (softcap) s << " softcap=" << *softcap;
        if (alibi_max_bias) s << " alibi_max_bias=" << *alibi_max_bias;
        if (alibi_slopes) s << " alibi_slopes=random";
        if (sinks) s << " sinks=random";
        if (kv_scales) s << " kv_scales=random";
        if (dropout > 0.0) s << " dropout=" << dropout << " seed=" << dropout_seed;
        if (variant.texel_loads) s << " texel=" << *variant.texel_loads;
        if (variant.shared_tiles) s << " shared=" << *variant.shared_tiles;
        if (variant.subgroup_ops) s << " subgroup=" << *variant.subgroup_ops;
        if (variant.fused_kernel) s << " kernel=" << to_string(*variant.fused_kernel);
        if (variant.gemm_kernel) s << " gemm=" << to_string(*variant.gemm_kernel);
        if (variant.tile_rows) s << " tile_rows=" << *variant.tile_rows;
        if (variant.tile_keys) s << " tile_keys=" << *variant.tile_keys;
        if (variant.decode_lanes_per_key) s << " lanes_per_key=" << *variant.decode_lanes_per_key;
        if (variant.named_accumulators) s << " named=" << *variant.named_accumulators;
        if (variant.row_tiles) s << " row_tiles=" << *variant.row_tiles;
        if (variant.q_in_shared) s << " q_in_shared=" << *variant.q_in_shared;
        if (variant.kv_apart) s << " kv_apart=" << *variant.kv_apart;
        if (variant.workgroup_matrices) s << " workgroup_matrices=" << *variant.workgroup_matrices;
        if (variant.gemm_shape) s << " gemm_shape=" << to_string(*variant.gemm_shape);
        if (logits) s << " logits=" << to_string(*logits);
        return s.str();
    }
};

struct CaseResult {
    bool ok = true;
    std::string message;
    AttentionReport report;
};

inline std::int64_t mask_elements(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

inline CaseResult run_case(Context& context, const Case& c, unsigned seed) {
    std::mt19937 rng(seed);
    HostTensor q = random_tensor(rng, c.dtype, c.layout, {c.B, c.Hq, c.Nq, c.Dk}, c.amplitude);
    const DType k_dtype = c.k_dtype.value_or(c.dtype), v_dtype = c.v_dtype.value_or(c.dtype);
    std::vector<float> k_scale, v_scale;
    if (c.kv_scales) {
        std::uniform_real_distribution<float> scale(0.25f, 4.0f);
        for (std::int64_t h = 0; h < c.Hkv; ++h) {
            if (is_fp8(k_dtype)) k_scale.push_back(scale(rng));
            if (is_fp8(v_dtype)) v_scale.push_back(scale(rng));
        }
    }
    HostTensor k = random_tensor(rng, k_dtype, c.layout, {c.B, c.Hkv, c.Nkv, c.Dk}, c.amplitude, k_scale);
    HostTensor v = random_tensor(rng, v_dtype, c.layout, {c.B, c.Hkv, c.Nkv, c.Dv}, 1.0f, v_scale);
    HostTensor o = nan_tensor(c.dtype, c.layout, {c.B, c.Hq, c.Nq, c.Dv});

    AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .k_scale = k_scale, .v_scale = v_scale};
    std::vector<std::int32_t> lengths;
    if (c.kv_lengths) {
        std::uniform_int_distribution<std::int32_t> len(0, static_cast<std::int32_t>(c.Nkv));
        for (std::int64_t b = 0; b < c.B; ++b) lengths.push_back(len(rng));
        in.kv_lengths = lengths;
    }
    std::vector<std::uint8_t> bool_data;
    if (c.bool_mask_shape) {
        std::bernoulli_distribution keep(0.7);
        bool_data.resize(static_cast<std::size_t>(mask_elements(*c.bool_mask_shape)));
        for (auto& x : bool_data) x = keep(rng) ? 1 : 0;
        in.bool_mask = MaskView{bool_data.data(), *c.bool_mask_shape};
    }
    std::vector<float> float_data;
    if (c.float_mask_shape) {
        std::uniform_real_distribution<float> add(-2.0f, 2.0f);
        std::bernoulli_distribution blocked(0.1);
        float_data.resize(static_cast<std::size_t>(mask_elements(*c.float_mask_shape)));
        for (auto& x : float_data) x = blocked(rng) ? -std::numeric_limits<float>::infinity() : add(rng);
        in.float_mask = MaskView{float_data.data(), *c.float_mask_shape};
    }
    std::vector<float> slopes, sinks;
    if (c.alibi_slopes) {
        std::uniform_real_distribution<float> slope(0.01f, 1.0f);
        for (std::int64_t h = 0; h < c.Hq; ++h) slopes.push_back(slope(rng));
        in.alibi_slopes = slopes;
    }
    if (c.sinks) {
        std::uniform_real_distribution<float> sink(-1.0f, 3.0f);
        for (std::int64_t h = 0; h < c.Hq; ++h) sinks.push_back(sink(rng));
        in.sinks = sinks;
    }
    const auto scores = static_cast<std::size_t>(c.B * c.Hq * c.Nq * c.Nkv);
    const auto rows = static_cast<std::size_t>(c.B * c.Hq * c.Nq);
    std::vector<float> weights(c.weights ? scores : 0, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> lse(c.lse ? rows : 0, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> logits(c.logits ? scores : 0, std::numeric_limits<float>::quiet_NaN());
    AttentionOutputs out{.o = o.mutable_view(), .weights = c.weights ? weights.data() : nullptr,
                         .lse = c.lse ? lse.data() : nullptr, .logits = c.logits ? logits.data() : nullptr};
    AttentionOptions options{.scale = c.scale, .causal = c.causal, .causal_offset = c.causal_offset,
                             .window = c.window, .softcap = c.softcap, .alibi_max_bias = c.alibi_max_bias,
                             .dropout = c.dropout, .seed = c.dropout_seed, .impl = c.impl, .variant = c.variant,
                             .splits = c.splits, .logits_stage = c.logits.value_or(LogitsStage::masked)};

    CaseResult result;
    result.report = attention(context, in, out, options);

    // The reference reads the same (16-bit-rounded) inputs, and what the kernel multiplied where its
    // products round their operands to f16 or bf16.
    const DType product_type = result.report.product_type;
    const bool rounds = product_type != DType::f32;
    const RoundedOperands rounded = rounds ? rounded_operands(in, product_type) : RoundedOperands{};
    const ReferenceStages stages = reference_stages(rounds ? rounded.inputs : in, options, c.weights);

    // The scores' bound for with_score_rounding (an fp8 K's values are its elements times its scale).
    double max_q = 0.0, max_k = 0.0, k_scale_max = 1.0;
    for (const double x : q.doubles()) max_q = std::max(max_q, std::abs(x));
    for (const double x : k.doubles()) max_k = std::max(max_k, std::abs(x));
    for (const float s : k_scale) k_scale_max = std::max(k_scale_max, static_cast<double>(s));
    const double scale = std::abs(c.scale.value_or(1.0 / std::sqrt(static_cast<double>(c.Dk))));
    const double score_bound = scale * static_cast<double>(c.Dk) * max_q * max_k * k_scale_max;
    const Tolerance tol = with_score_rounding(tolerance_for(c.dtype, c.Nkv, product_type), score_bound);
    std::vector<double> got, want;
    for (std::int64_t b = 0; b < c.B; ++b)
        for (std::int64_t h = 0; h < c.Hq; ++h)
            for (std::int64_t n = 0; n < c.Nq; ++n)
                for (std::int64_t d = 0; d < c.Dv; ++d) {
                    got.push_back(o.at(b, h, n, d));
                    want.push_back(stages.output[static_cast<std::size_t>(((b * c.Hq + h) * c.Nq + n) * c.Dv + d)]);
                }
    std::ostringstream failures;
    auto check = [&](const char* what, const std::vector<double>& g, const std::vector<double>& w, Tolerance t) {
        const Comparison cmp = compare(g, w, t);
        if (!cmp.ok) {
            result.ok = false;
            failures << what << ": " << cmp.message << "\n";
        }
    };
    check("o", got, want, tol);
    // Weights and lse are computed in fp32 from fp32 scores in every dtype.
    if (c.weights) check("weights", {weights.begin(), weights.end()}, stages.weights, tolerance_for(DType::f32));
    if (c.logits) {  // the reference's own logits output, −∞ where masked (compared exactly)
        HostTensor unused_o = nan_tensor(c.dtype, c.layout, {c.B, c.Hq, c.Nq, c.Dv});
        std::vector<float> reference_logits(scores);
        reference_attention(in, AttentionOutputs{.o = unused_o.mutable_view(), .logits = reference_logits.data()}, options);
        check("logits", {logits.begin(), logits.end()}, {reference_logits.begin(), reference_logits.end()},
              tolerance_for(DType::f32));
    }
    if (c.lse) {
        const Comparison cmp = compare_lse({lse.begin(), lse.end()}, stages.lse, score_rounding(score_bound));
        if (!cmp.ok) {
            result.ok = false;
            failures << "lse: " << cmp.message << "\n";
        }
    }
    result.message = c.describe(seed) + " [" + result.report.variant + "]\n" + failures.str();
    return result;
}

}  // namespace vkattn::testing

// MultiHeadAttention: the weights checked and kept, and the host forward pass: the weights and
// activations uploaded, then MhaLayer's forward (projections, the core over head views, the output
// projection), the results read back.
#include <cmath>

#include "attention/path.hpp"
#include "attention/problem.hpp"
#include "mha/mha_layer_state.hpp"
#include "mha/mha_problem.hpp"
#include "plan/host_tensors.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/context.hpp"
#include "vkattn/quantize.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/mha.hpp"
#include "types/narrow.hpp"

namespace vkattn {
namespace {

using detail::MhaProblem;

std::vector<float> checked_copy(std::span<const float> values, std::int64_t rows, std::int64_t cols, const char* key) {
    const auto want = static_cast<std::size_t>(rows * cols);
    if (values.size() != want)
        throw InvalidArgument(key, "has " + std::to_string(values.size()) + " values but must be [" + std::to_string(rows) +
                                       (cols > 1 ? ", " + std::to_string(cols) : "") + "] = " + std::to_string(want) +
                                       " for this layer.");
    for (const float x : values)
        if (!std::isfinite(x)) throw InvalidArgument(key, "holds a value that is not finite.");
    return {values.begin(), values.end()};
}

using detail::u64;

}  // namespace

MultiHeadAttention::MultiHeadAttention(const MhaConfig& config, const MhaWeights& weights) : config_(config) {
    const std::int64_t E = config.embed_dim, H = config.num_heads;
    if (E < 1) throw InvalidArgument("embed_dim", "must be at least 1, not " + std::to_string(E) + ".");
    if (H < 1) throw InvalidArgument("num_heads", "must be at least 1, not " + std::to_string(H) + ".");
    if (E % H != 0)
        throw InvalidArgument("embed_dim", "embed_dim (" + std::to_string(E) + ") must be divisible by num_heads (" +
                                               std::to_string(H) + "), as in PyTorch.");
    if (config.kdim < 0 || config.vdim < 0) throw InvalidArgument("kdim", "kdim and vdim must not be negative.");
    config_.kdim = config.kdim ? config.kdim : E;
    config_.vdim = config.vdim ? config.vdim : E;
    const std::int64_t kdim = config_.kdim, vdim = config_.vdim;

    const bool packed = !weights.in_proj_weight.empty();
    const bool separate = !weights.q_proj_weight.empty() || !weights.k_proj_weight.empty() || !weights.v_proj_weight.empty();
    if (packed && separate)
        throw InvalidArgument("in_proj_weight", "give either in_proj_weight or q/k/v_proj_weight, not both.");
    if (packed) {
        if (kdim != E || vdim != E)
            throw InvalidArgument("in_proj_weight", "a packed projection needs kdim = vdim = embed_dim; this layer has kdim " +
                                                        std::to_string(kdim) + " and vdim " + std::to_string(vdim) +
                                                        " (use q_proj_weight, k_proj_weight, v_proj_weight).");
        const std::vector<float> all = checked_copy(weights.in_proj_weight, 3 * E, E, "in_proj_weight");
        for (int i = 0; i < 3; ++i) w_[i].assign(all.begin() + i * E * E, all.begin() + (i + 1) * E * E);
    } else {
        if (weights.q_proj_weight.empty())
            throw InvalidArgument("q_proj_weight", "the input projection is missing: give in_proj_weight [3E, E] or "
                                                   "q_proj_weight, k_proj_weight and v_proj_weight.");
        w_[q] = checked_copy(weights.q_proj_weight, E, E, "q_proj_weight");
        w_[k] = checked_copy(weights.k_proj_weight, E, kdim, "k_proj_weight");
        w_[v] = checked_copy(weights.v_proj_weight, E, vdim, "v_proj_weight");
    }
    w_[o] = checked_copy(weights.out_proj_weight, E, E, "out_proj.weight");
    if (config.bias) {
        const std::vector<float> in_bias = checked_copy(weights.in_proj_bias, 3 * E, 1, "in_proj_bias");
        for (int i = 0; i < 3; ++i) b_[i].assign(in_bias.begin() + i * E, in_bias.begin() + (i + 1) * E);
        b_[o] = checked_copy(weights.out_proj_bias, E, 1, "out_proj.bias");
    } else if (!weights.in_proj_bias.empty() || !weights.out_proj_bias.empty()) {
        throw InvalidArgument(weights.in_proj_bias.empty() ? "out_proj.bias" : "in_proj_bias",
                              "is given but the layer has bias=False.");
    }
}

MhaReport MultiHeadAttention::forward(Context& context, const MhaInputs& inputs, const MhaOutputs& outputs,
                                      const MhaOptions& options) const {
    const MhaProblem mp = detail::resolve_mha(config_, inputs, outputs, options);
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const auto& caps = runtime.device().caps();
    const DType dtype = options.dtype;
    if (dtype != DType::f32) vk::require_fp16_storage(caps, "dtype", dtype);

    // The attention core sees the projected tensors through head views. resolve() and the planner
    // need only their shapes and strides; the data lives on the device, so the views point at a
    // placeholder the host never reads.
    static const std::byte device_resident{};
    const AttentionInputs core_in = mp.core_inputs(&device_resident, &device_resident, &device_resident, dtype);
    std::vector<float> per_head_weights(mp.want_weights ? static_cast<std::size_t>(mp.N * mp.H * mp.L * mp.S) : 0);
    const AttentionOutputs core_out{.o = mp.mutable_heads(const_cast<std::byte*>(&device_resident), dtype, mp.L),
                                    .weights = mp.want_weights ? per_head_weights.data() : nullptr};
    const AttentionOptions core_options = mp.core_options(options);
    const detail::Problem problem = detail::resolve(core_in, core_out, core_options);
    const auto plan = detail::ContextAccess::state(context).plan(detail::spec_of(core_in, core_out, core_options));

    const std::int64_t E = mp.E, eb = static_cast<std::int64_t>(size_of(dtype));
    {
        const std::uint64_t input_bytes = u64((mp.query_rows() * E + mp.key_rows() * (mp.kdim + mp.vdim)) * eb);
        const std::uint64_t weights = u64((E * (2 * E + mp.kdim + mp.vdim)) * eb + 4 * E * 4);
        const std::uint64_t activations = u64((3 * mp.query_rows() + 2 * mp.key_rows()) * E * eb);  // q, k, v, o, out
        const std::uint64_t masks = u64(mp.attend.size() + 4 * mp.additive.size());
        const std::uint64_t attention_weights = mp.want_weights ? u64(mp.N * mp.H * mp.L * mp.S) * 4 : 0;
        detail::check_device_memory(runtime, input_bytes + weights + activations + masks + attention_weights +
                                                 plan->scratch_bytes,
                                    "inputs " + std::to_string(input_bytes) + ", weights " + std::to_string(weights) +
                                        ", projections and output " + std::to_string(activations) + ", masks " +
                                        std::to_string(masks) + ", attention weights " +
                                        std::to_string(attention_weights) + ", the attention's scratch " +
                                        std::to_string(plan->scratch_bytes));
    }
    // The weights uploaded (one submission), then one path with the device API (MhaLayer): the
    // activations and masks uploaded, the forward pass recorded, the results read back.
    const auto layer = std::make_shared<const detail::MhaLayerState>(context, *this, dtype);
    Batch batch = detail::BatchAccess::make(runtime);
    detail::BatchState& state = detail::BatchAccess::state(batch);
    std::uint64_t device_bytes = layer->weight_bytes;
    // [rows, features] activations, filled from host fp32 values when given.
    auto rows = [&](std::int64_t r, std::int64_t features, const float* host, const std::string& what) {
        DeviceTensor t = detail::own_dense(runtime, dtype, {1, 1, r, features}, what);
        device_bytes += detail::TensorAccess::storage(t)->buffer.size();
        if (host != nullptr) detail::write_fresh(state, t, detail::in_dtype(host, r * features, dtype).data());
        return t;
    };
    detail::MhaForward call{.L = mp.L, .S = mp.S, .N = mp.N};
    call.x_q = rows(mp.query_rows(), E, mp.query, "query");  // self-attention uploads the query once
    call.x_k = mp.same_as(1) == 0 ? call.x_q : rows(mp.key_rows(), mp.kdim, mp.key, "key");
    call.x_v = mp.same_as(2) == 0 ? call.x_q : mp.same_as(2) == 1 ? call.x_k : rows(mp.key_rows(), mp.vdim, mp.value, "value");
    call.out = rows(mp.query_rows(), E, nullptr, "out");
    if (core_in.bool_mask) call.bool_mask = detail::own_mask(runtime, state, *core_in.bool_mask, DType::u8, "attn_mask");
    if (core_in.float_mask) call.float_mask = detail::own_mask(runtime, state, *core_in.float_mask, DType::f32, "attn_mask");
    if (mp.want_weights) call.weights = detail::own_dense(runtime, DType::f32, {mp.N, mp.H, mp.L, mp.S}, "weights");
    call.options = core_options;
    const AttentionReport core_report = detail::record_forward(state, layer, call, false, true);
    std::vector<std::byte> result(static_cast<std::size_t>(mp.query_rows() * E * eb));
    detail::read_back(state, call.out, make_view(static_cast<void*>(result.data()), dtype, Layout::bhnd, call.out.shape()));
    if (mp.want_weights)
        detail::read_back(state, call.weights, make_view(static_cast<void*>(per_head_weights.data()), DType::f32,
                                                         Layout::bhnd, call.weights.shape()));
    Submission submission = batch.submit();
    submission.wait();

    const auto count = static_cast<std::size_t>(mp.query_rows() * E);
    dequantize_row(dtype, {reinterpret_cast<const std::uint8_t*>(result.data()), result.size()}, {outputs.out, count});
    if (mp.want_weights) detail::store_mha_weights(mp, per_head_weights, outputs.attn_weights);

    MhaReport report;
    report.attention = core_report;
    report.attention.flops = problem.flops();
    report.gpu_ms = submission.gpu_ms();
    report.device_bytes = device_bytes + 2 * u64((mp.query_rows() + mp.key_rows()) * E * eb) + plan->scratch_bytes;
    const double rows_q = static_cast<double>(mp.query_rows()), rows_kv = static_cast<double>(mp.key_rows());
    report.flops = 2.0 * static_cast<double>(E) *
                       (rows_q * static_cast<double>(E) + rows_kv * static_cast<double>(mp.kdim + mp.vdim) +
                        rows_q * static_cast<double>(E)) +
                   report.attention.flops;
    return report;
}

}  // namespace vkattn

// MultiHeadAttention: the weights checked and kept, and the forward pass as one submission:
// three input projections, the attention core over head views, the output projection.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "attention/dispatch.hpp"
#include "plan/host_tensors.hpp"
#include "plan/plan_cache.hpp"
#include "plan/plan_state.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/batch.hpp"
#include "attention/io.hpp"
#include "attention/kernels.hpp"
#include "attention/path.hpp"
#include "attention/problem.hpp"
#include "attention/tuning.hpp"
#include "mha/mha_problem.hpp"
#include "runtime.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/mha.hpp"

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

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
std::uint64_t u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// Host fp32 data in the device dtype.
std::vector<std::byte> in_dtype(const float* data, std::int64_t count, DType dtype) {
    std::vector<std::byte> bytes(static_cast<std::size_t>(count) * size_of(dtype));
    if (dtype == DType::f32) {
        std::memcpy(bytes.data(), data, bytes.size());
    } else {
        auto* h = reinterpret_cast<std::uint16_t*>(bytes.data());
        for (std::int64_t i = 0; i < count; ++i) h[i] = float_to_half(data[i]);
    }
    return bytes;
}

// One projection Y[rows, out] = X[rows, in]·Wᵀ + b on the device.
struct Linear {
    const vk::Buffer* x;
    const vk::Buffer* w;
    const vk::Buffer* b;  // a placeholder without bias
    const vk::Buffer* y;
    std::int64_t rows, in, out;
    bool has_bias;
};

void record_linear(detail::Program& r, detail::Runtime& runtime, const Linear& l, DType dtype) {
    const vk::DeviceCaps& caps = runtime.device().caps();
    const std::uint64_t eb = size_of(dtype);
    const std::uint64_t largest = std::max({u64(l.rows * l.in), u64(l.out * l.in), u64(l.rows * l.out)}) * eb;
    const detail::BmmConfig config = detail::choose_linear(caps, dtype, l.in, largest, {});
    if (largest > runtime.max_binding_bytes())
        throw ResourceLimit("a projection operand needs " + std::to_string(largest) + " bytes in one binding; the device "
                            "allows " + std::to_string(runtime.max_binding_bytes()) + " (reduce the batch or sequence).");
    const std::int64_t row_blocks = (l.rows + config.block_rows() - 1) / config.block_rows();
    if (row_blocks > caps.max_workgroup_count[1])
        throw ResourceLimit("a projection over " + std::to_string(l.rows) + " rows needs " + std::to_string(row_blocks) +
                            " workgroups along y; the device allows " + std::to_string(caps.max_workgroup_count[1]) + ".");
    const vk::Kernel& kernel = detail::bmm_kernel(runtime, config, true, dtype, dtype, dtype,
                                                  l.has_bias ? detail::BmmAdd::bias : detail::BmmAdd::none);
    detail::BmmParams params{.chunk = {.first_unit = 0, .first_row = 0, .rows = u32(l.rows)},
                             .M = u32(l.rows),
                             .N = u32(l.out),
                             .K = u32(l.in),
                             .alpha = 1.0f,
                             .heads = 1,
                             .group = 1};
    params.a.stride = {0, 0, u32(l.in), 1};
    params.b.stride = {0, 0, u32(l.in), 1};  // W is [out][in]: B transposed
    params.c.stride = {0, 0, u32(l.out), 1};
    detail::Dispatch d{.kernel = &kernel, .params = params};
    d.bindings = {{1, l.x, 0, l.x->size(), dtype}, {2, l.w, 0, l.w->size(), dtype}, {3, l.y, 0, l.y->size()},
                  {4, l.b, 0, l.b->size()}};
    d.groups = {u32((l.out + config.block_cols() - 1) / config.block_cols()), u32(row_blocks), 1};
    r.dispatch(d);
}

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
    if (dtype == DType::f16) vk::require_fp16_storage(caps, "dtype");

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
    const auto plan = runtime.plans().get(runtime, detail::spec_of(core_in, core_out, core_options));

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
    Batch batch = detail::BatchAccess::make(runtime);
    detail::BatchState& state = detail::BatchAccess::state(batch);
    std::uint64_t device_bytes = 0;
    // A flat device tensor of `count` elements, filled from host bytes when given.
    auto flat = [&](DType type, std::int64_t count, const void* host, const std::string& what) {
        const std::array<std::int64_t, 4> shape{1, 1, 1, count};
        DeviceTensor t = detail::own_dense(runtime, type, shape, what);
        device_bytes += detail::TensorAccess::storage(t)->buffer.size();
        if (host != nullptr) detail::write_fresh(state, t, host);
        return t;
    };
    auto buffer = [](const DeviceTensor& t) { return &detail::TensorAccess::storage(t)->buffer; };
    // Inputs (self-attention uploads the query once), weights in the device dtype, biases fp32.
    const std::vector<std::byte> query = in_dtype(mp.query, mp.query_rows() * E, dtype);
    const DeviceTensor x_q = flat(dtype, mp.query_rows() * E, query.data(), "query");
    DeviceTensor x_k = x_q, x_v;
    if (mp.key != mp.query) {
        const std::vector<std::byte> key = in_dtype(mp.key, mp.key_rows() * mp.kdim, dtype);
        x_k = flat(dtype, mp.key_rows() * mp.kdim, key.data(), "key");
    }
    if (mp.value == mp.query) x_v = x_q;
    else if (mp.value == mp.key) x_v = x_k;
    else {
        const std::vector<std::byte> value = in_dtype(mp.value, mp.key_rows() * mp.vdim, dtype);
        x_v = flat(dtype, mp.key_rows() * mp.vdim, value.data(), "value");
    }
    DeviceTensor w[4], b[4];
    const DeviceTensor no_bias = flat(DType::f32, 4, nullptr, "an unused bias binding");
    for (int i = 0; i < 4; ++i) {
        const std::vector<std::byte> bytes = in_dtype(w_[i].data(), static_cast<std::int64_t>(w_[i].size()), dtype);
        w[i] = flat(dtype, static_cast<std::int64_t>(w_[i].size()), bytes.data(), "a projection weight");
        b[i] = b_[i].empty() ? no_bias
                             : flat(DType::f32, static_cast<std::int64_t>(b_[i].size()), b_[i].data(), "a projection bias");
    }
    // Projected tensors and the core's output, [rows, E] in the inputs' order, seen by the core
    // through head views; the masks the core reads.
    auto heads = [&](const auto& view, const std::string& what) {
        DeviceTensor t = detail::own_tensor(runtime, dtype, view.shape, view.strides, what);
        device_bytes += detail::TensorAccess::storage(t)->buffer.size();
        return t;
    };
    DeviceAttentionInputs din{.q = heads(core_in.q, "the projected queries"),
                              .k = heads(core_in.k, "the projected keys"),
                              .v = heads(core_in.v, "the projected values")};
    DeviceAttentionOutputs dout{.o = heads(core_out.o, "the attention output")};
    if (core_in.bool_mask) din.bool_mask = detail::own_mask(runtime, state, *core_in.bool_mask, DType::u8, "attn_mask");
    if (core_in.float_mask)
        din.float_mask = detail::own_mask(runtime, state, *core_in.float_mask, DType::f32, "attn_mask");
    if (mp.want_weights) dout.weights = detail::own_dense(runtime, DType::f32, {mp.N, mp.H, mp.L, mp.S}, "weights");
    const DeviceTensor out = flat(dtype, mp.query_rows() * E, nullptr, "out");
    if (runtime.poison_outputs())  // its own buffer: all of it, padding included
        vkCmdFillBuffer(state.begin_op(), buffer(out)->get(), 0, VK_WHOLE_SIZE,
                        detail::nan_word(dtype));

    auto program = std::make_shared<detail::Program>(runtime);
    const bool bias = config_.bias;
    record_linear(*program, runtime, {buffer(x_q), buffer(w[q]), buffer(b[q]), buffer(din.q), mp.query_rows(), E, E, bias}, dtype);
    record_linear(*program, runtime, {buffer(x_k), buffer(w[k]), buffer(b[k]), buffer(din.k), mp.key_rows(), mp.kdim, E, bias}, dtype);
    record_linear(*program, runtime, {buffer(x_v), buffer(w[v]), buffer(b[v]), buffer(din.v), mp.key_rows(), mp.vdim, E, bias}, dtype);
    program->barrier();
    plan->record(*program, din, dout);
    record_linear(*program, runtime, {buffer(dout.o), buffer(w[o]), buffer(b[o]), buffer(out), mp.query_rows(), E, E, bias}, dtype);
    plan->prepare(state);
    const VkCommandBuffer commands = state.begin_op();
    state.time_begin();
    program->replay(commands);
    state.time_end();
    state.keep(program);
    std::vector<std::byte> result(static_cast<std::size_t>(mp.query_rows() * E * eb));
    detail::read_back(state, out, make_view(static_cast<void*>(result.data()), dtype, Layout::bhnd, out.shape()));
    if (mp.want_weights)
        detail::read_back(state, dout.weights, make_view(static_cast<void*>(per_head_weights.data()), DType::f32,
                                                         Layout::bhnd, dout.weights.shape()));
    Submission submission = batch.submit();
    submission.wait();

    const auto count = static_cast<std::size_t>(mp.query_rows() * E);
    if (dtype == DType::f32) {
        std::memcpy(outputs.out, result.data(), count * 4);
    } else {
        const auto* h = reinterpret_cast<const std::uint16_t*>(result.data());
        for (std::size_t i = 0; i < count; ++i) outputs.out[i] = half_to_float(h[i]);
    }
    if (mp.want_weights) detail::store_mha_weights(mp, per_head_weights, outputs.attn_weights);

    MhaReport report;
    report.attention = plan->report;
    report.attention.flops = problem.flops();
    report.gpu_ms = submission.gpu_ms();
    report.device_bytes = device_bytes + program->scratch_bytes();
    const double rows_q = static_cast<double>(mp.query_rows()), rows_kv = static_cast<double>(mp.key_rows());
    report.flops = 2.0 * static_cast<double>(E) *
                       (rows_q * static_cast<double>(E) + rows_kv * static_cast<double>(mp.kdim + mp.vdim) +
                        rows_q * static_cast<double>(E)) +
                   report.attention.flops;
    return report;
}

}  // namespace vkattn

// MultiHeadAttention::backward on host data: the weights and activations uploaded, the layer's
// backward recorded on the device (mha/mha_backward.cpp), the gradients read back and named as
// PyTorch names them.
#include <algorithm>

#include "attention/path.hpp"
#include "attention/problem.hpp"
#include "mha/mha_layer_state.hpp"
#include "mha/mha_problem.hpp"
#include "plan/host_tensors.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/mha.hpp"

namespace vkattn {

const MhaGradients::Parameter* MhaGradients::find(const std::string& name) const {
    for (const Parameter& p : parameters)
        if (p.name == name) return &p;
    return nullptr;
}

MhaGradients MultiHeadAttention::backward(Context& context, const MhaInputs& inputs, const HostArray& grad_out,
                                          const MhaOptions& options) const {
    float placeholder = 0.0f;  // resolve_mha checks an output; backward() writes none
    const detail::MhaProblem mp = detail::resolve_mha(config_, inputs, MhaOutputs{.out = &placeholder}, options);
    detail::check_mha_grad_out(mp, inputs, grad_out);
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const DType dtype = options.dtype;
    if (dtype != DType::f32) vk::require_fp16_storage(runtime.device().caps(), "dtype", dtype);
    static const std::byte device_resident{};
    const AttentionInputs core_in = mp.core_inputs(&device_resident, &device_resident, &device_resident, dtype);
    const AttentionOptions core_options = mp.core_options(options);
    const detail::Problem problem = detail::resolve(
        core_in, AttentionOutputs{.o = mp.mutable_heads(const_cast<std::byte*>(&device_resident), dtype, mp.L)}, core_options);

    const std::int64_t E = mp.E, eb = static_cast<std::int64_t>(size_of(dtype));
    const std::int64_t qr = mp.query_rows(), kr = mp.key_rows();
    {
        const auto u = [](std::int64_t n) { return static_cast<std::uint64_t>(n); };
        // The inputs and dY; q, k, v and their gradients; o and dO; lse and the row-sum ones.
        const std::uint64_t activations = u((2 * qr * E + kr * (mp.kdim + mp.vdim)) * eb + (qr + 2 * kr) * E * eb * 2 +
                                            2 * qr * E * eb + mp.N * mp.H * mp.L * 4 + std::max(qr, kr) * eb);
        const std::uint64_t input_grads = u((qr * E + kr * (mp.kdim + mp.vdim)) * 4);
        const std::uint64_t weights = u(E * (2 * E + mp.kdim + mp.vdim) * (eb + 4) + 8 * E * 4);
        detail::check_device_memory(runtime, activations + input_grads + weights,
                                    "activations and their gradients " + std::to_string(activations + input_grads) +
                                        ", weights and their gradients " + std::to_string(weights));
    }

    const auto layer = std::make_shared<const detail::MhaLayerState>(context, *this, dtype);
    Batch batch(context);  // with the context's tuner winners (attention_backward reads them)
    detail::BatchState& state = detail::BatchAccess::state(batch);
    auto rows = [&](std::int64_t r, std::int64_t features, const float* host, const std::string& what) {
        DeviceTensor t = detail::own_dense(runtime, dtype, {1, 1, r, features}, what);
        detail::write_fresh(state, t, detail::in_dtype(host, r * features, dtype).data());
        return t;
    };
    auto f32 = [&](std::int64_t r, std::int64_t c, const std::string& what) {
        return detail::own_dense(runtime, DType::f32, {1, 1, r, c}, what);
    };
    detail::MhaBackward call;
    detail::MhaForward& fw = call.forward;
    fw.L = mp.L;
    fw.S = mp.S;
    fw.N = mp.N;
    fw.x_q = rows(qr, E, mp.query, "query");
    fw.x_k = mp.same_as(1) == 0 ? fw.x_q : rows(kr, mp.kdim, mp.key, "key");
    fw.x_v = mp.same_as(2) == 0 ? fw.x_q : mp.same_as(2) == 1 ? fw.x_k : rows(kr, mp.vdim, mp.value, "value");
    if (core_in.bool_mask) fw.bool_mask = detail::own_mask(runtime, state, *core_in.bool_mask, DType::u8, "attn_mask");
    if (core_in.float_mask) fw.float_mask = detail::own_mask(runtime, state, *core_in.float_mask, DType::f32, "attn_mask");
    fw.options = core_options;
    call.grad_out = rows(qr, E, grad_out.data, "grad_out");
    call.dx[0] = f32(qr, E, "the query's gradient");
    if (mp.same_as(1) == 1) call.dx[1] = f32(kr, mp.kdim, "the key's gradient");
    if (mp.same_as(2) == 2) call.dx[2] = f32(kr, mp.vdim, "the value's gradient");
    const std::int64_t in_features[4] = {E, mp.kdim, mp.vdim, E};
    for (int i = 0; i < 4; ++i) {
        call.dw[i] = f32(E, in_features[i], "a weight's gradient");
        if (config_.bias) call.db[i] = f32(1, E, "a bias's gradient");
    }

    state.time_begin();
    const AttentionReport core_report = detail::record_backward(state, layer, call);
    state.time_end();
    MhaGradients g;
    std::vector<float>* dx_host[3] = {&g.query, &g.key, &g.value};
    for (int i = 0; i < 3; ++i)
        if (call.dx[i].defined()) {
            dx_host[i]->resize(static_cast<std::size_t>(call.dx[i].elements()));
            detail::read_back(state, call.dx[i],
                              make_view(static_cast<void*>(dx_host[i]->data()), DType::f32, Layout::bhnd, call.dx[i].shape()));
        }
    std::vector<float> dw[4], db[4];
    for (int i = 0; i < 4; ++i)
        for (auto [t, host] : {std::pair{&call.dw[i], &dw[i]}, std::pair{&call.db[i], &db[i]}})
            if (t->defined()) {
                host->resize(static_cast<std::size_t>(t->elements()));
                detail::read_back(state, *t, make_view(static_cast<void*>(host->data()), DType::f32, Layout::bhnd, t->shape()));
            }
    Submission submission = batch.submit();
    submission.wait();

    g.parameters = detail::named_parameters(mp, config_.bias, dw, db);
    g.report.attention = core_report;
    g.report.gpu_ms = submission.gpu_ms();
    // The backward's products: twice the forward's projections (dX and dW), ones·A row sums aside,
    // plus the forward recomputed and the core's backward.
    const double rq = static_cast<double>(qr), rk = static_cast<double>(kr), e = static_cast<double>(E);
    const double projections = 2.0 * e * (2.0 * rq * e + rk * static_cast<double>(mp.kdim + mp.vdim));
    g.report.flops = 3.0 * projections + problem.flops() + core_report.flops;
    return g;
}

}  // namespace vkattn

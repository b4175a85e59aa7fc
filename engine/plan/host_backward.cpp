// vkattn::attention_backward on host memory: one submission that uploads the inputs, runs the
// forward plan (for o and its log-sum-exp), the backward kernels, and reads the gradients back.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "attention/backward.hpp"
#include "attention/path.hpp"
#include "plan/host_tensors.hpp"
#include "plan/plan_cache.hpp"
#include "plan/plan_state.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace {

using detail::TensorAccess;

const vk::Buffer& buffer_of(const DeviceTensor& t) { return TensorAccess::storage(t)->buffer; }

// The NaN word a poisoned gradient is filled with.
std::uint32_t poison_word(DType dtype) {
    if (dtype == DType::bf16) return 0x7fc07fc0u;
    return detail::nan_word(dtype);
}

}  // namespace

AttentionReport attention_backward(Context& context, const AttentionInputs& in, const TensorView& grad_out,
                                   const AttentionGradients& grads, const AttentionOptions& options) {
    const detail::Problem p = detail::resolve_backward(in, grad_out, grads, options);
    if (grads.d_float_mask != nullptr)
        throw InvalidArgument("d_float_mask", "the float mask's gradient is not computed on the device yet (the "
                                              "three-stage backward will); reference_attention_backward computes it.");
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();

    // The forward's o (dense, q's dtype) and lse on the device: the host never sees them.
    std::uint32_t unused_o = 0;
    float unused_lse = 0.0f;
    AttentionOutputs forward;
    forward.o = make_view<void*>(&unused_o, p.dtype, Layout::bhnd, {p.B, p.Hq, p.Nq, p.Dv});
    forward.lse = &unused_lse;
    const detail::Problem forward_problem = detail::resolve(in, forward, options);
    const auto plan = runtime.plans().get(runtime, detail::spec_of(in, forward, options));

    detail::BackwardOperands ops;
    ops.forward = detail::own_buffer_operands(p, in.q.strides, in.k.strides, in.v.strides,
                                              dense_strides(Layout::bhnd, forward.o.shape));
    ops.grad_out = {grad_out.strides, 0, detail::allocated_bytes(detail::span_bytes(grad_out.dtype, grad_out.shape, grad_out.strides))};
    auto gradient_strides = [](const MutableTensorView& g, const TensorView& input) {
        return g.data != nullptr ? g.strides : dense_strides(Layout::bhnd, input.shape);
    };
    const std::array<std::int64_t, 4> dq_strides = gradient_strides(grads.dq, in.q),
                                      dk_strides = gradient_strides(grads.dk, in.k),
                                      dv_strides = gradient_strides(grads.dv, in.v);
    ops.dq = {dq_strides, 0, detail::allocated_bytes(detail::span_bytes(p.dtype, in.q.shape, dq_strides))};
    ops.dk = {dk_strides, 0, detail::allocated_bytes(detail::span_bytes(p.k_dtype, in.k.shape, dk_strides))};
    ops.dv = {dv_strides, 0, detail::allocated_bytes(detail::span_bytes(p.v_dtype, in.v.shape, dv_strides))};
    std::string why;
    const std::optional<detail::BackwardConfig> config = detail::choose_backward(
        runtime.device().caps(), p, in.q.strides, in.k.strides, in.v.strides, grad_out.strides, options.variant, &why);
    if (!config) throw ResourceLimit("the device cannot run the backward pass: " + why + ".");
    const detail::BackwardRun run(runtime, p, *config, ops);  // refuses before anything is allocated

    detail::HostTensors host(runtime, forward_problem, in, forward);
    const bool want_kv = grads.dk.data != nullptr || grads.dv.data != nullptr;
    const std::uint64_t backward_bytes = ops.grad_out.buffer_bytes + (grads.dq.data ? ops.dq.buffer_bytes : 0) +
                                         (want_kv ? ops.dk.buffer_bytes + ops.dv.buffer_bytes : 0) + run.scratch_bytes();
    detail::check_device_memory(runtime, host.bytes() + plan->scratch_bytes + backward_bytes,
                                host.itemised() + ", the forward's scratch " + std::to_string(plan->scratch_bytes) +
                                    ", the backward's tensors and scratch " + std::to_string(backward_bytes));

    Batch batch = detail::BatchAccess::make(runtime);
    detail::BatchState& state = detail::BatchAccess::state(batch);
    DeviceAttentionInputs device_in;
    DeviceAttentionOutputs device_out;
    host.upload(state, device_in, device_out);
    plan->run(state, device_in, device_out, false);

    DeviceTensor d_o = detail::own_tensor(runtime, grad_out.dtype, grad_out.shape, grad_out.strides, "grad_out");
    detail::write_fresh(state, d_o, grad_out.data);
    std::optional<DeviceTensor> dq, dk, dv, d_sinks;
    if (grads.dq.data) dq = detail::own_tensor(runtime, p.dtype, in.q.shape, dq_strides, "dq");
    if (want_kv) {  // the kernel writes both
        dk = detail::own_tensor(runtime, p.k_dtype, in.k.shape, dk_strides, "dk");
        dv = detail::own_tensor(runtime, p.v_dtype, in.v.shape, dv_strides, "dv");
    }
    if (grads.d_sinks) d_sinks = detail::own_dense(runtime, DType::f32, {1, 1, 1, p.Hq}, "d_sinks");
    if (runtime.poison_outputs())
        for (const auto* t : {&dq, &dk, &dv, &d_sinks})
            if (*t) state.fill(**t, poison_word((*t)->dtype()));

    detail::BackwardBuffers buffers;
    detail::DeviceBuffers& f = buffers.forward;
    f.q = &buffer_of(device_in.q);
    f.k = &buffer_of(device_in.k);
    f.v = &buffer_of(device_in.v);
    f.o = &buffer_of(device_out.o);
    f.lse = &buffer_of(device_out.lse);
    f.lengths = f.bool_mask = f.float_mask = f.head_terms = &plan->placeholder->buffer;
    f.lengths_slice = detail::whole(16);
    if (device_in.kv_lengths.defined()) {
        f.lengths = &buffer_of(device_in.kv_lengths);
        f.lengths_slice = detail::whole(static_cast<std::uint64_t>(p.B) * 4);
    }
    if (device_in.bool_mask.defined()) f.bool_mask = &buffer_of(device_in.bool_mask);
    if (device_in.float_mask.defined()) f.float_mask = &buffer_of(device_in.float_mask);
    if (plan->head_terms) {
        f.head_terms = &plan->head_terms->buffer;
        f.head_terms_bytes = plan->head_terms_bytes;
    }
    buffers.grad_out = &buffer_of(d_o);
    if (dq) buffers.dq = &buffer_of(*dq);
    if (dk) buffers.dk = &buffer_of(*dk);
    if (dv) buffers.dv = &buffer_of(*dv);
    if (d_sinks) buffers.d_sinks = &buffer_of(*d_sinks);

    auto program = std::make_shared<detail::Program>(runtime);
    run.record(*program, buffers);
    state.time_begin();
    program->replay(state.begin_op());
    state.time_end();
    state.keep(program);
    plan->keep_constants(state);
    state.keep(TensorAccess::storage(d_o));
    for (const auto* t : {&dq, &dk, &dv, &d_sinks})
        if (*t) state.keep(TensorAccess::storage(**t));
    if (dq) detail::read_back(state, *dq, grads.dq);
    if (dk && grads.dk.data) detail::read_back(state, *dk, grads.dk);
    if (dv && grads.dv.data) detail::read_back(state, *dv, grads.dv);
    if (d_sinks)
        detail::read_back(state, *d_sinks,
                          make_view<void*>(grads.d_sinks, DType::f32, Layout::bhnd, {1, 1, 1, p.Hq}));
    Submission submission = batch.submit();
    submission.wait();

    AttentionReport report = run.report;
    report.gpu_ms = submission.gpu_ms();
    report.device_bytes = host.bytes() + plan->scratch_bytes + backward_bytes;
    return report;
}

}  // namespace vkattn

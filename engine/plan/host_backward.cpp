// vkattn::attention_backward on host memory: one submission that uploads the inputs, runs the
// forward plan (for o and its log-sum-exp), records the backward on those device tensors (the
// device call's record_backward) and reads the gradients back.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "attention/backward.hpp"
#include "attention/path.hpp"
#include "plan/host_tensors.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {

AttentionReport attention_backward(Context& context, const AttentionInputs& in, const TensorView& grad_out,
                                   const AttentionGradients& grads, const AttentionOptions& options) {
    const detail::Problem p = detail::resolve_backward(in, grad_out, grads, options);
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();

    // The forward's o (dense, q's dtype) and lse on the device: the host never sees them.
    std::uint32_t unused_o = 0;
    float unused_lse = 0.0f;
    AttentionOutputs forward;
    forward.o = make_view<void*>(&unused_o, p.dtype, Layout::bhnd, {p.B, p.Hq, p.Nq, p.Dv});
    forward.lse = &unused_lse;
    detail::Problem forward_problem = p;  // the same request, with the lse the backward reads
    forward_problem.want_lse = true;
    const auto plan = detail::ContextAccess::state(context).plan(detail::spec_of(in, forward, options));
    detail::HostTensors host(runtime, forward_problem, in, forward);

    // The backward's tensors, with the caller's strides (dense where a gradient is not wanted).
    auto strides_of = [](const MutableTensorView& g, const TensorView& input) {
        return g.data != nullptr ? g.strides : dense_strides(Layout::bhnd, input.shape);
    };
    const std::array<std::int64_t, 4> dq_strides = strides_of(grads.dq, in.q), dk_strides = strides_of(grads.dk, in.k),
                                      dv_strides = strides_of(grads.dv, in.v);
    const bool want_kv = grads.dk.data != nullptr || grads.dv.data != nullptr;  // computed together
    auto bytes = [](DType dtype, const std::array<std::int64_t, 4>& shape, const std::array<std::int64_t, 4>& strides) {
        return detail::allocated_bytes(detail::span_bytes(dtype, shape, strides));
    };
    const std::uint64_t backward_bytes =
        bytes(grad_out.dtype, grad_out.shape, grad_out.strides) + (grads.dq.data ? bytes(p.dtype, in.q.shape, dq_strides) : 0) +
        (want_kv ? bytes(p.k_dtype, in.k.shape, dk_strides) + bytes(p.v_dtype, in.v.shape, dv_strides) : 0) +
        detail::backward_scratch_bytes(p) +
        (grads.d_float_mask ? detail::allocated_bytes(static_cast<std::uint64_t>(p.float_mask.elements) * 4) : 0);
    detail::check_device_memory(runtime, host.bytes() + plan->scratch_bytes + backward_bytes,
                                host.itemised() + ", the forward's scratch " + std::to_string(plan->scratch_bytes) +
                                    ", the backward's tensors and scratch " + std::to_string(backward_bytes));

    Batch batch(context);  // with the context's tuner winners (attention_backward reads them)
    detail::BatchState& state = detail::BatchAccess::state(batch);
    DeviceAttentionInputs device_in;
    DeviceAttentionOutputs device_out;
    host.upload(state, device_in, device_out);
    plan->run(state, device_in, device_out, false);

    DeviceTensor d_o = detail::own_tensor(runtime, grad_out.dtype, grad_out.shape, grad_out.strides, "grad_out");
    detail::write_fresh(state, d_o, grad_out.data);
    DeviceAttentionGradients device_grads;
    if (grads.dq.data) device_grads.dq = detail::own_tensor(runtime, p.dtype, in.q.shape, dq_strides, "dq");
    if (want_kv) {
        device_grads.dk = detail::own_tensor(runtime, p.k_dtype, in.k.shape, dk_strides, "dk");
        device_grads.dv = detail::own_tensor(runtime, p.v_dtype, in.v.shape, dv_strides, "dv");
    }
    if (grads.d_sinks) device_grads.d_sinks = detail::own_dense(runtime, DType::f32, {1, 1, 1, p.Hq}, "d_sinks");
    if (grads.d_float_mask)
        device_grads.d_float_mask = detail::own_dense(runtime, DType::f32, device_in.float_mask.shape(), "d_float_mask");

    state.time_begin();
    AttentionReport report =
        detail::record_backward(state, device_in, device_out.o, device_out.lse, d_o, device_grads, options);
    state.time_end();
    if (grads.dq.data) detail::read_back(state, device_grads.dq, grads.dq);
    if (grads.dk.data) detail::read_back(state, device_grads.dk, grads.dk);
    if (grads.dv.data) detail::read_back(state, device_grads.dv, grads.dv);
    if (grads.d_sinks)
        detail::read_back(state, device_grads.d_sinks,
                          make_view<void*>(grads.d_sinks, DType::f32, Layout::bhnd, {1, 1, 1, p.Hq}));
    if (grads.d_float_mask)
        detail::read_back(state, device_grads.d_float_mask,
                          make_view<void*>(grads.d_float_mask, DType::f32, Layout::bhnd, device_in.float_mask.shape()));
    Submission submission = batch.submit();
    submission.wait();

    report.gpu_ms = submission.gpu_ms();
    report.device_bytes = host.bytes() + plan->scratch_bytes + backward_bytes;
    return report;
}

}  // namespace vkattn

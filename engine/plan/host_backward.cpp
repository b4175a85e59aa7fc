// vkattn::attention_backward on host memory: one submission that uploads the inputs, runs the
// forward plan (for o and its log-sum-exp), records the backward on those device tensors (the
// device call's record_backward) and reads the gradients back.
#include "plan/host_backward.hpp"

#include <array>
#include <cstdint>
#include <string>

#include "attention/backward.hpp"
#include "attention/path.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace detail {

HostBackward::HostBackward(Context& context, const AttentionInputs& in, const TensorView& grad_out,
                           const AttentionGradients& grads, const AttentionOptions& options)
    : runtime_(&ContextAccess::runtime(context)), in_(&in), grad_out_(&grad_out), grads_(&grads), options_(&options),
      problem_(resolve_backward(in, grad_out, grads, options)) {
    runtime_->ensure_usable();
    const Problem& p = problem_;
    // The forward's o (dense, q's dtype) and lse on the device: the host never sees them.
    forward_.o = make_view<void*>(&unused_o_, p.dtype, Layout::bhnd, {p.B, p.Hq, p.Nq, p.Dv});
    forward_.lse = &unused_lse_;
    forward_problem_ = p;
    forward_problem_.want_lse = true;
    plan_ = ContextAccess::state(context).plan(spec_of(in, forward_, options));
    host_ = std::make_unique<HostTensors>(*runtime_, forward_problem_, in, forward_);

    // The backward's tensors, with the caller's strides (dense where a gradient is not wanted).
    auto strides_of = [](const MutableTensorView& g, const TensorView& input) {
        return g.data != nullptr ? g.strides : dense_strides(Layout::bhnd, input.shape);
    };
    dq_strides_ = strides_of(grads.dq, in.q);
    dk_strides_ = strides_of(grads.dk, in.k);
    dv_strides_ = strides_of(grads.dv, in.v);
    want_kv_ = grads.dk.data != nullptr || grads.dv.data != nullptr;  // computed together
    auto bytes = [](DType dtype, const std::array<std::int64_t, 4>& shape, const std::array<std::int64_t, 4>& strides) {
        return allocated_bytes(span_bytes(dtype, shape, strides));
    };
    backward_bytes_ =
        bytes(grad_out.dtype, grad_out.shape, grad_out.strides) + (grads.dq.data ? bytes(p.dtype, in.q.shape, dq_strides_) : 0) +
        (want_kv_ ? bytes(p.k_dtype, in.k.shape, dk_strides_) + bytes(p.v_dtype, in.v.shape, dv_strides_) : 0) +
        backward_scratch_bytes(p) + (grads.d_float_mask ? allocated_bytes(static_cast<std::uint64_t>(p.float_mask.elements) * 4) : 0);
    check_device_memory(*runtime_, device_bytes(),
                        host_->itemised() + ", the forward's scratch " + std::to_string(plan_->scratch_bytes) +
                            ", the backward's tensors and scratch " + std::to_string(backward_bytes_));
}

std::uint64_t HostBackward::device_bytes() const { return host_->bytes() + plan_->scratch_bytes + backward_bytes_; }

void HostBackward::upload(BatchState& state) {
    const Problem& p = problem_;
    const AttentionGradients& grads = *grads_;
    host_->upload(state, device_in_, device_out_);
    plan_->run(state, device_in_, device_out_, false);
    d_o_ = own_tensor(*runtime_, grad_out_->dtype, grad_out_->shape, grad_out_->strides, "grad_out");
    write_fresh(state, d_o_, grad_out_->data);
    if (grads.dq.data) device_grads_.dq = own_tensor(*runtime_, p.dtype, in_->q.shape, dq_strides_, "dq");
    if (want_kv_) {
        device_grads_.dk = own_tensor(*runtime_, p.k_dtype, in_->k.shape, dk_strides_, "dk");
        device_grads_.dv = own_tensor(*runtime_, p.v_dtype, in_->v.shape, dv_strides_, "dv");
    }
    if (grads.d_sinks) device_grads_.d_sinks = own_dense(*runtime_, DType::f32, {1, 1, 1, p.Hq}, "d_sinks");
    if (grads.d_float_mask)
        device_grads_.d_float_mask = own_dense(*runtime_, DType::f32, device_in_.float_mask.shape(), "d_float_mask");
}

AttentionReport HostBackward::record(BatchState& state) const {
    return record_backward(state, device_in_, device_out_.o, device_out_.lse, d_o_, device_grads_, *options_);
}

void HostBackward::download(BatchState& state) const {
    const AttentionGradients& grads = *grads_;
    if (grads.dq.data) read_back(state, device_grads_.dq, grads.dq);
    if (grads.dk.data) read_back(state, device_grads_.dk, grads.dk);
    if (grads.dv.data) read_back(state, device_grads_.dv, grads.dv);
    if (grads.d_sinks)
        read_back(state, device_grads_.d_sinks, make_view<void*>(grads.d_sinks, DType::f32, Layout::bhnd, {1, 1, 1, problem_.Hq}));
    if (grads.d_float_mask)
        read_back(state, device_grads_.d_float_mask,
                  make_view<void*>(grads.d_float_mask, DType::f32, Layout::bhnd, device_in_.float_mask.shape()));
}

}  // namespace detail

AttentionReport attention_backward(Context& context, const AttentionInputs& in, const TensorView& grad_out,
                                   const AttentionGradients& grads, const AttentionOptions& options) {
    detail::HostBackward call(context, in, grad_out, grads, options);
    Batch batch(context);  // with the context's tuner winners (attention_backward reads them)
    detail::BatchState& state = detail::BatchAccess::state(batch);
    call.upload(state);
    state.time_begin();
    AttentionReport report = call.record(state);
    state.time_end();
    call.download(state);
    Submission submission = batch.submit();
    submission.wait();
    report.gpu_ms = submission.gpu_ms();
    report.device_bytes = call.device_bytes();
    return report;
}

}  // namespace vkattn

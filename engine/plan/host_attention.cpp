// vkattn::attention on host memory: upload, the same device path as every other call, download.
#include "plan/host_attention.hpp"

#include "attention/path.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"

namespace vkattn {
namespace detail {
namespace {
Runtime& usable_runtime(Context& context) {
    Runtime& runtime = ContextAccess::runtime(context);
    runtime.ensure_usable();
    return runtime;
}
}  // namespace

HostAttention::HostAttention(Context& context, const AttentionInputs& in, const AttentionOutputs& out,
                             const AttentionOptions& options)
    : problem_(resolve(in, out, options)),
      runtime_(&usable_runtime(context)),
      plan_(ContextAccess::state(context).plan(spec_of(in, out, options))),
      host_(*runtime_, problem_, in, out) {
    check_device_memory(*runtime_, host_.bytes() + plan_->scratch_bytes,
                        host_.itemised() + ", the path's scratch " + std::to_string(plan_->scratch_bytes));
}

void HostAttention::upload(BatchState& state) { host_.upload(state, device_in_, device_out_); }

void HostAttention::record(BatchState& state, bool cache) const { plan_->run(state, device_in_, device_out_, cache); }

void HostAttention::download(BatchState& state) { host_.download(state, device_out_); }

AttentionReport HostAttention::report() const {
    AttentionReport report = plan_->report;
    report.flops = problem_.flops();  // the host knows the key lengths
    report.device_bytes = host_.bytes() + plan_->scratch_bytes;
    return report;
}

}  // namespace detail

AttentionReport attention(Context& context, const AttentionInputs& in, const AttentionOutputs& out,
                          const AttentionOptions& options) {
    detail::HostAttention call(context, in, out, options);
    Batch batch = detail::BatchAccess::make(detail::ContextAccess::runtime(context));
    detail::BatchState& state = detail::BatchAccess::state(batch);
    call.upload(state);
    state.time_begin();
    call.record(state, false);
    state.time_end();
    call.download(state);
    Submission submission = batch.submit();
    submission.wait();
    AttentionReport report = call.report();
    report.gpu_ms = submission.gpu_ms();
    return report;
}

}  // namespace vkattn

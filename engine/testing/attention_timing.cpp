#include "vkattn/testing/attention_timing.hpp"

#include <algorithm>

#include "attention/path.hpp"
#include "context_state.hpp"
#include "plan/host_backward.hpp"
#include "plan/host_tensors.hpp"
#include "plan/plan_state.hpp"
#include "testing/timed_runs.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::testing {

AttentionTiming time_attention(Context& context, const AttentionInputs& in, const AttentionOutputs& out,
                               const AttentionOptions& options, const WarmUp& warm_up, int repeat) {
    if (repeat < 1) throw InvalidArgument("repeat", "at least one timed repeat is needed.");
    const detail::Problem p = detail::resolve(in, out, options);
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const auto plan = detail::ContextAccess::state(context).plan(detail::spec_of(in, out, options));
    detail::HostTensors host(runtime, p, in, out);
    detail::check_device_memory(runtime, host.bytes() + plan->scratch_bytes, host.itemised() + ", the path's scratch " +
                                                                                 std::to_string(plan->scratch_bytes));
    DeviceAttentionInputs device_in;
    DeviceAttentionOutputs device_out;
    AttentionTiming result;
    // The program cached for these tensors' memory (`cache`): after the first run, recording is binds
    // and dispatches, as in a decode loop.
    result.samples_ms = timing::timed_runs(
        runtime, warm_up, repeat, [&](detail::BatchState& state) { host.upload(state, device_in, device_out); },
        [&](detail::BatchState& state, VkCommandBuffer) { plan->run(state, device_in, device_out, true); },
        [&](detail::BatchState& state) { host.download(state, device_out); }, &result.warmup_runs);
    result.report = plan->report;
    result.report.flops = p.flops();  // the host knows the key lengths
    result.report.gpu_ms = summarize(result.samples_ms).median_ms;
    result.report.device_bytes = host.bytes() + plan->scratch_bytes;
    return result;
}

AttentionTiming time_attention_backward(Context& context, const AttentionInputs& in, const TensorView& grad_out,
                                        const AttentionGradients& grads, const AttentionOptions& options,
                                        const WarmUp& warm_up, int repeat) {
    if (repeat < 1) throw InvalidArgument("repeat", "at least one timed repeat is needed.");
    detail::HostBackward call(context, in, grad_out, grads, options);
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    // The context's tuner winners, as the host call's batch has them (the backward chooses as it records).
    const auto* tuning = &detail::ContextAccess::state(context).tuning;
    AttentionTiming result;
    result.samples_ms = timing::timed_runs(
        runtime, warm_up, repeat,
        [&](detail::BatchState& state) {
            state.tuning = tuning;
            call.upload(state);
        },
        [&](detail::BatchState& state, VkCommandBuffer) {
            state.tuning = tuning;
            result.report = call.record(state);
        },
        [&](detail::BatchState& state) { call.download(state); }, &result.warmup_runs);
    result.report.gpu_ms = summarize(result.samples_ms).median_ms;
    result.report.device_bytes = call.device_bytes();
    return result;
}

}  // namespace vkattn::testing

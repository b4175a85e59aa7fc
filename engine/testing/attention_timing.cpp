#include "vkattn/testing/attention_timing.hpp"

#include "context_state.hpp"
#include "plan/host_backward.hpp"
#include "plan/host_attention.hpp"
#include "testing/timed_runs.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::testing {

AttentionTiming time_attention(Context& context, const AttentionInputs& in, const AttentionOutputs& out,
                               const AttentionOptions& options, const WarmUp& warm_up, int repeat) {
    if (repeat < 1) throw InvalidArgument("repeat", "at least one timed repeat is needed.");
    detail::HostAttention call(context, in, out, options);
    AttentionTiming result;
    // The program cached for these tensors' memory (`cache`): after the first run, recording is binds
    // and dispatches, as in a decode loop.
    result.samples_ms = timing::timed_runs(
        detail::ContextAccess::runtime(context), warm_up, repeat, [&](detail::BatchState& state) { call.upload(state); },
        [&](detail::BatchState& state, VkCommandBuffer) { call.record(state, true); },
        [&](detail::BatchState& state) { call.download(state); }, &result.warmup_runs);
    result.report = call.report();
    result.report.gpu_ms = summarize(result.samples_ms).median_ms;
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

// vkattn::attention on host memory: upload, the same device path as every other call, download.
#include <cstring>

#include "attention/path.hpp"
#include "plan/host_tensors.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"

namespace vkattn {

AttentionReport attention(Context& context, const AttentionInputs& in, const AttentionOutputs& out,
                          const AttentionOptions& options) {
    const detail::Problem p = detail::resolve(in, out, options);
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const auto plan = detail::ContextAccess::state(context).plan(detail::spec_of(in, out, options));

    detail::HostTensors host(runtime, p, in, out);
    detail::check_device_memory(runtime, host.bytes() + plan->scratch_bytes, host.itemised() + ", the path's scratch " +
                                                                                 std::to_string(plan->scratch_bytes));
    Batch batch = detail::BatchAccess::make(runtime);
    detail::BatchState& state = detail::BatchAccess::state(batch);
    DeviceAttentionInputs device_in;
    DeviceAttentionOutputs device_out;
    host.upload(state, device_in, device_out);
    state.time_begin();
    plan->run(state, device_in, device_out, false);
    state.time_end();
    host.download(state, device_out);
    Submission submission = batch.submit();
    submission.wait();

    AttentionReport report = plan->report;
    report.flops = p.flops();  // the host knows the key lengths
    report.gpu_ms = submission.gpu_ms();
    report.device_bytes = host.bytes() + plan->scratch_bytes;
    return report;
}

}  // namespace vkattn

#include "attention/path.hpp"

#include <mutex>

#include "runtime.hpp"

namespace vkattn::detail {

AttentionReport run_on_host(Runtime& runtime, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            PathRun& path) {
    Transfers t(runtime);
    const DeviceTensors d = upload_tensors(t, p, in, out);
    path.allocate(t);
    std::lock_guard lock(runtime.submit_mutex());
    DispatchRecorder recorder(runtime);
    vk::CommandStream& stream = runtime.commands();
    Recording r{runtime, t, recorder, stream, stream.begin()};
    t.record_uploads(r.commands);
    r.barrier();
    stream.timestamp(0);
    path.record(r, d);
    stream.timestamp(1);
    t.record_downloads(r.commands);
    runtime.submit_and_wait();
    copy_results(t, d, p, out);
    path.copy_extra_results(t, out);

    AttentionReport report = path.report;
    report.gpu_ms = stream.elapsed_ms();
    report.device_bytes = t.device_bytes();
    return report;
}

}  // namespace vkattn::detail

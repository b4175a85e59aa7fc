#include "attention/path.hpp"

#include <mutex>
#include <string>

#include "vkattn/errors.hpp"

#include "runtime.hpp"

namespace vkattn::detail {

void check_device_memory(const Runtime& runtime, std::uint64_t needed, const std::string& what) {
    const std::uint64_t heap = runtime.device_memory_bytes();
    if (needed > heap)
        throw ResourceLimit("the request needs " + std::to_string(needed) + " bytes of device memory (" + what +
                            "), but the device's largest device-local heap holds " + std::to_string(heap) +
                            " bytes; nothing was allocated.");
}

AttentionReport run_on_host(Runtime& runtime, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            PathRun& path) {
    const TensorBytes bytes = tensor_bytes(p, in, out);
    const std::uint64_t masks = static_cast<std::uint64_t>(p.bool_mask.elements + 4 * p.float_mask.elements);
    check_device_memory(runtime, bytes.q + bytes.k + bytes.v + bytes.o + bytes.lse + masks + path.scratch_bytes(),
                        "q " + std::to_string(bytes.q) + ", k " + std::to_string(bytes.k) + ", v " + std::to_string(bytes.v) +
                            ", o " + std::to_string(bytes.o) + ", masks " + std::to_string(masks) + ", the path's scratch " +
                            std::to_string(path.scratch_bytes()));
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

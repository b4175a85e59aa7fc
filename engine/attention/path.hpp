// A planned attention path and the submission it records into. Planning (the constructor of a
// PathRun) checks every binding against the device's limits before anything is allocated;
// record() then adds the path's dispatches to a Recording that others may share: vkattn::attention
// wraps it in uploads and downloads (run_on_host), the multi-head module puts its projections
// around it, all in one submission.
#pragma once

#include <memory>

#include <vulkan/vulkan.h>

#include "attention/dispatch.hpp"
#include "attention/io.hpp"
#include "attention/problem.hpp"
#include "attention/transfers.hpp"
#include "vk/commands.hpp"

namespace vkattn::detail {

class Runtime;

// One submission being built.
struct Recording {
    Runtime& runtime;
    Transfers& transfers;
    DispatchRecorder& recorder;
    vk::CommandStream& stream;
    VkCommandBuffer commands;

    void dispatch(const Dispatch& d) { recorder.record(commands, d); }
    void barrier() { stream.barrier(); }
};

class PathRun {
public:
    virtual ~PathRun() = default;
    // Device memory allocate() will take, known at planning time.
    virtual std::uint64_t scratch_bytes() const = 0;
    // Allocates the path's scratch and outputs (before the uploads are recorded, so that outputs
    // are poisoned with them when the runtime asks).
    virtual void allocate(Transfers& transfers) = 0;
    // Records the path's dispatches over device tensors laid out as the problem's views say,
    // ending with a barrier.
    virtual void record(Recording& recording, const DeviceTensors& tensors) = 0;
    // After the submission: results only this path produces (the weights) to the host.
    virtual void copy_extra_results(const Transfers&, const AttentionOutputs&) const {}
    // What ran: path, variant, slices and flops (the caller adds times and memory).
    AttentionReport report;
};

// Refuses a request whose device memory (`needed`, itemised in `what`) exceeds the device's
// largest device-local heap, before anything is allocated: ResourceLimit naming both sizes.
void check_device_memory(const Runtime& runtime, std::uint64_t needed, const std::string& what);

// The path options.impl asks for (or `auto` chooses), planned. Throws InvalidArgument when it
// cannot run on this device, ResourceLimit when the problem cannot fit.
std::unique_ptr<PathRun> plan_attention(Runtime& runtime, const Problem& problem, const AttentionInputs& inputs,
                                        const AttentionOutputs& outputs, const AttentionOptions& options);

// Host tensors in, host results out: upload, record, one submission, copy back.
AttentionReport run_on_host(Runtime& runtime, const Problem& problem, const AttentionInputs& inputs,
                            const AttentionOutputs& outputs, PathRun& path);

}  // namespace vkattn::detail

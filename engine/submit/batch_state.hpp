// The engine's side of a Batch: the ring slot it records into, the resources and host work its
// submission carries, and the rule that every operation begins with a barrier.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <vulkan/vulkan.h>

#include "vk/command_ring.hpp"
#include "vk/buffer.hpp"
#include "vkattn/batch.hpp"

namespace vkattn::detail {

struct TuningTable;

class Runtime;

struct BatchState {
    explicit BatchState(Runtime& owner) : runtime(&owner) {}
    // An acquired slot that was never submitted goes back to the ring; nothing recorded runs. A batch
    // recorded into the caller's command buffer and never finished hands its resources to the
    // runtime until the context goes: the caller may still submit the commands.
    ~BatchState();
    BatchState(const BatchState&) = delete;
    BatchState& operator=(const BatchState&) = delete;

    // The command buffer for the next operation, after a barrier that makes every earlier device
    // write visible to it: this batch's earlier operations and every earlier submission's (the
    // queue runs submissions in order; the barrier orders their memory). Acquires a slot first.
    VkCommandBuffer begin_op();
    // Batch::upload, download and fill.
    void upload(const DeviceTensor& to, const TensorView& from);
    void download(const DeviceTensor& from, const MutableTensorView& to);
    void fill(const DeviceTensor& to, std::uint32_t word);
    // A host-visible buffer that lives until the submission completes.
    const vk::Buffer& host_buffer(std::uint64_t bytes, vk::MemoryIntent intent, const std::string& what);
    // Keeps `resource` alive until the submission completes.
    void keep(std::shared_ptr<void> resource) { work.keep.push_back(std::move(resource)); }
    // Host work to run once the submission completes.
    void on_complete(std::function<void()> host_work) { work.on_complete.push_back(std::move(host_work)); }
    // The GPU time a Submission reports: by default from the first operation to the submission;
    // the engine narrows it from time_begin() to time_end() (the host API times its attention, not
    // its uploads).
    void time_begin();
    void time_end();

    Runtime* runtime;
    // The context's tuner winners (ContextState::tuning), for the calls that choose as they record
    // (attention_backward); null for a batch made from a runtime alone (the heuristics then).
    const std::unique_ptr<TuningTable>* tuning = nullptr;
    // The caller's command buffer (record_into), recorded instead of a ring slot's.
    VkCommandBuffer external = VK_NULL_HANDLE;
    std::optional<std::uint32_t> slot;
    InFlight work;
    bool timing_begun = false, timing_ended = false, explicit_timing = false;

private:
    void write_start_stamp();
};

struct BatchAccess {
    static Batch make(Runtime& runtime) { return Batch(runtime); }
    static RecordedWork recorded(std::shared_ptr<InFlight> work) {
        RecordedWork r;
        r.work_ = std::move(work);
        return r;
    }
    static BatchState& state(Batch& batch) { return *batch.state_; }
    static Submission submission(std::shared_ptr<SubmissionState> state, Runtime& runtime) {
        Submission s;
        s.state_ = std::move(state);
        s.runtime_ = &runtime;
        return s;
    }
};

}  // namespace vkattn::detail

// The bottom floor of what a Context owns (context_state.hpp): instance, device, kernel cache, the
// ring of command buffers and its submissions, in destruction order. It knows nothing above it.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vk/command_ring.hpp"
#include "vk/device.hpp"
#include "vk/instance.hpp"
#include "vk/pipeline.hpp"
#include "vkattn/context.hpp"

namespace vkattn::detail {

struct ContextState;

class Runtime {
public:
    explicit Runtime(const ContextOptions& options);
    // On the caller's device (vkattn/vulkan.hpp).
    Runtime(const VulkanDevice& caller, const ContextOptions& options);
    ~Runtime();

    const ContextOptions& options() const { return options_; }
    const DeviceInfo& info() const { return info_; }
    vk::Instance& instance() { return *instance_; }
    const vk::Device& device() const { return *device_; }
    // Thread-safe: lookups and pipeline builds are serialised by the cache's own mutex.
    vk::KernelCache& kernels() { return *kernels_; }
    // The command buffers batches record into (thread-safe).
    CommandRing& ring() { return *ring_; }
    // The directory of the pipeline cache and the tuning table (empty: none).
    std::filesystem::path cache_directory() const;

    // Map device-local memory directly (zero-copy) instead of staging.
    bool zero_copy() const { return device_->caps().host_visible_device_memory && !options_.force_staging; }
    // The largest range one binding may cover.
    std::uint64_t max_binding_bytes() const;
    // One request's device-memory budget: the largest device-local heap (or the test hook's less).
    std::uint64_t device_memory_bytes() const;
    // Fill outputs with NaN on the device before each run ($VKATTN_POISON=1, tests).
    bool poison_outputs() const { return poison_; }

    // A ring slot for a new batch. A timeout waiting for the oldest submission marks the context lost.
    std::uint32_t acquire_slot();
    // Submits a ring slot's commands (the queue is guarded here: the context may be shared between
    // threads). Counts submissions for options().simulate_timeout_on_submission.
    std::shared_ptr<SubmissionState> submit(std::uint32_t slot, InFlight work, bool timed);
    // Waits up to options().fence_timeout. A timeout or a lost device marks the context lost
    // (DeviceLost): the submission may still be running, so from then on the resources of in-flight
    // work are kept (keep_until_idle) instead of freed, and every later request is refused.
    void wait(const std::shared_ptr<SubmissionState>& submission);
    bool lost() const { return lost_.load(); }
    // Throws DeviceLost when the context was lost earlier.
    void ensure_usable() const;
    // Takes ownership of resources a lost submission may still use; freed after the device idles.
    void keep_until_idle(std::shared_ptr<void> resources);

private:
    ContextOptions options_;
    DeviceInfo info_;
    bool poison_ = false;
    std::unique_ptr<vk::Instance> instance_;
    std::unique_ptr<vk::Device> device_;
    std::unique_ptr<vk::KernelCache> kernels_;
    std::unique_ptr<CommandRing> ring_;
    // Guards vkQueueSubmit: our own, or the caller's when it shares its queue with other threads.
    std::mutex own_queue_mutex_;
    std::mutex* queue_mutex_ = &own_queue_mutex_;
    // What both constructors take from the environment (over options_), before the device.
    void read_environment();
    // What both constructors make once the device is known.
    void start();
    std::atomic<std::uint64_t> submissions_{0};  // counted for options().simulate_timeout_on_submission
    std::atomic<bool> lost_{false};
    std::string lost_reason_;  // written once, under graveyard_mutex_, before lost_ is set
    void mark_lost(const std::string& reason);
    std::mutex graveyard_mutex_;
    std::vector<std::shared_ptr<void>> graveyard_;
};

// A Context's floors, for the engine (and the tests and vkattn::testing, which build with its
// private headers). The public header only names this struct, as a friend of Context. Defined in
// context_state.cpp, where a ContextState is complete.
struct ContextAccess {
    static Runtime& runtime(Context& context);
    static ContextState& state(Context& context);  // context_state.hpp: the plans and the tuning
};

}  // namespace vkattn::detail

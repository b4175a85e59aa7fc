// What a Context owns: instance, device, kernel cache and command stream, in destruction order.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vk/commands.hpp"
#include "vk/device.hpp"
#include "vk/instance.hpp"
#include "vk/pipeline.hpp"
#include "vkattn/context.hpp"

namespace vkattn::detail {

class Runtime {
public:
    explicit Runtime(const ContextOptions& options);
    ~Runtime();

    const ContextOptions& options() const { return options_; }
    const DeviceInfo& info() const { return info_; }
    vk::Instance& instance() { return *instance_; }
    const vk::Device& device() const { return *device_; }
    // Thread-safe: lookups and pipeline builds are serialised by the cache's own mutex.
    vk::KernelCache& kernels() { return *kernels_; }
    // The one command buffer; call with submit_mutex() held. Throws DeviceLost once the context is
    // lost: a timed-out submission may still be pending, and a pending command buffer must not be
    // reset (a thread that waited for the mutex behind the lost submission would otherwise do so).
    vk::CommandStream& commands() {
        ensure_usable();
        return *commands_;
    }
    // Serialises recording, submission, the wait and the readback: the context may be shared between
    // threads, and it has one command stream and one queue.
    std::mutex& submit_mutex() { return submit_mutex_; }

    // Map device-local memory directly (zero-copy) instead of staging.
    bool zero_copy() const { return device_->caps().host_visible_device_memory && !options_.force_staging; }
    // The largest range one binding may cover.
    std::uint64_t max_binding_bytes() const;
    // One request's device-memory budget: the largest device-local heap (or the test hook's less).
    std::uint64_t device_memory_bytes() const;
    // Fill outputs with NaN on the device before each run ($VKATTN_POISON=1, tests).
    bool poison_outputs() const { return poison_; }

    // Submits the recorded chain and waits up to options().fence_timeout. A timeout or a lost device
    // marks the context lost (DeviceLost is rethrown): the submission may still be running, so from
    // then on the resources of in-flight work are kept (keep_until_idle) instead of freed, and every
    // later request is refused. Call with submit_mutex() held.
    void submit_and_wait();
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
    std::unique_ptr<vk::CommandStream> commands_;
    std::mutex submit_mutex_;
    std::uint64_t submissions_ = 0;  // counted for options().simulate_timeout_on_submission
    std::atomic<bool> lost_{false};
    std::string lost_reason_;  // written once, under submit_mutex_, before lost_ is set
    std::mutex graveyard_mutex_;
    std::vector<std::shared_ptr<void>> graveyard_;
};

// A Context's Runtime, for the engine (and the tests and vkattn::testing, which build with its private
// headers). The public header only names this struct, as a friend of Context.
struct ContextAccess {
    static Runtime& runtime(Context& context) { return *context.runtime_; }
};

}  // namespace vkattn::detail

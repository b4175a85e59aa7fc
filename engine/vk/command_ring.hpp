// A ring of command buffers, each with its own pool and timestamp queries, so that several
// submissions can be in flight and several threads can record at once. A slot is recorded by one
// Batch, submitted, and reused once its submission has completed. The ring grows while every slot
// is busy, up to kMaxSlots; then a new batch waits for the oldest submission.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <deque>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vk/buffer.hpp"
#include "vk/handle.hpp"

namespace vkattn::vk {
class Device;
}

namespace vkattn::detail {

// What a submission leaves behind until its fence signals: the resources its commands use, and
// host work to do once the device is done (downloads into the caller's memory).
struct InFlight {
    std::vector<std::shared_ptr<void>> keep;
    std::vector<std::function<void()>> on_complete;
};

// One submission's life, shared by the ring slot and the caller's Submission handle. Whoever sees
// the fence signalled first completes it (once): timestamps read, host work run, resources freed.
// Each submission has its own fence, so a handle can wait on it even after the slot was reused.
struct SubmissionState {
    vk::Handle<VkFence> fence;
    VkQueryPool queries = VK_NULL_HANDLE;  // the slot's, read before the slot is reused
    bool simulated_timeout = false;  // ContextOptions::simulate_timeout_on_submission
    std::mutex mutex;
    std::atomic<bool> completed{false};
    bool timed = false;  // whether the batch wrote both timestamps
    double gpu_ms = 0.0;
    InFlight work;
};

// Fences handed out unsignalled and taken back when their submission's state goes, so that a
// steady loop of submissions creates none. Shared with the states it lends to (they may outlive the
// ring by a moment in the runtime's teardown).
class FencePool {
public:
    explicit FencePool(VkDevice device) : device_(device) {}
    ~FencePool();
    vk::Handle<VkFence> take(const std::shared_ptr<FencePool>& self);

private:
    VkDevice device_;
    std::mutex mutex_;
    std::vector<VkFence> free_;
};

class CommandRing {
public:
    static constexpr std::size_t kMaxSlots = 32;
    // Host buffers up to this size are kept by their slot and reused by its later batches.
    static constexpr std::uint64_t kPooledBytes = std::uint64_t{1} << 20;
    static constexpr std::size_t kPooledPerSlot = 8;

    explicit CommandRing(const vk::Device& device);
    ~CommandRing();

    // A free slot, begun for recording: its command buffer reset and begun, its queries reset.
    // When every slot is busy and the ring is full, waits for the oldest submission (up to
    // `timeout`), completing it.
    std::uint32_t acquire(std::chrono::milliseconds timeout);
    // Under the mutex: another thread may be growing the ring (elements stay put, the index does not).
    VkCommandBuffer commands(std::uint32_t slot) const {
        std::lock_guard lock(mutex_);
        return slots_[slot].commands;
    }
    VkQueryPool queries(std::uint32_t slot) const {
        std::lock_guard lock(mutex_);
        return slots_[slot].queries.get();
    }
    // A slot acquired but not submitted (a Batch discarded): free again.
    void release(std::uint32_t slot);
    // A host-visible buffer of at least `bytes` for the batch recording `slot` (a staging or readback
    // buffer): one of the slot's own, free again once the slot's last submission completed, or a
    // new one the slot keeps. Null above kPooledBytes or kPooledPerSlot: the batch allocates its own.
    std::shared_ptr<vk::Buffer> host_buffer(std::uint32_t slot, std::uint64_t bytes, vk::MemoryIntent intent,
                                            const std::string& what);

    // Ends and submits the slot's commands; the state is completed later by wait() or poll().
    std::shared_ptr<SubmissionState> submit(std::uint32_t slot, InFlight work, bool timed, bool simulate_timeout,
                                            std::mutex& queue_mutex);
    // Waits up to `timeout` and completes; false on timeout (the caller decides what that means).
    bool wait(SubmissionState& state, std::chrono::milliseconds timeout);
    // Completes the submission when its fence has signalled; whether it is complete.
    bool poll(SubmissionState& state);

private:
    struct Pooled {
        std::shared_ptr<vk::Buffer> buffer;
        vk::MemoryIntent intent;
        bool in_use = false;
    };
    struct Slot {
        std::vector<Pooled> host;  // staging and readback buffers, reused batch after batch
        vk::Handle<VkCommandPool> pool;
        VkCommandBuffer commands = VK_NULL_HANDLE;
        vk::Handle<VkQueryPool> queries;
        bool recording = false;
        std::uint64_t serial = 0;                  // submission order, for waiting on the oldest
        std::shared_ptr<SubmissionState> pending;  // the last submission from this slot
    };
    void complete(SubmissionState& state);
    bool reusable(Slot& slot);
    void add_slot();

    const vk::Device* device_;
    std::shared_ptr<FencePool> fences_;
    mutable std::mutex mutex_;  // the slots' bookkeeping
    std::deque<Slot> slots_;  // deque: slots stay where they are as the ring grows
    std::uint64_t serial_ = 0;
};

}  // namespace vkattn::detail

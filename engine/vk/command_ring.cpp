#include "vk/command_ring.hpp"

#include <algorithm>
#include <bit>
#include <optional>

#include "vk/check.hpp"
#include "vk/device.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {

FencePool::~FencePool() {
    for (VkFence f : free_) vkDestroyFence(device_, f, nullptr);
}

vk::Handle<VkFence> FencePool::take(const std::shared_ptr<FencePool>& self) {
    VkFence fence = VK_NULL_HANDLE;
    {
        std::lock_guard lock(mutex_);
        if (!free_.empty()) {
            fence = free_.back();
            free_.pop_back();
        }
    }
    if (fence != VK_NULL_HANDLE) {
        VKATTN_CHECK(vkResetFences(device_, 1, &fence), "resetting a fence");
    } else {
        VkFenceCreateInfo info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VKATTN_CHECK(vkCreateFence(device_, &info, nullptr, &fence), "creating a fence");
    }
    return vk::Handle<VkFence>(fence, [pool = self](VkFence f) {
        std::lock_guard lock(pool->mutex_);
        pool->free_.push_back(f);
    });
}

CommandRing::CommandRing(const vk::Device& device)
    : device_(&device), fences_(std::make_shared<FencePool>(device.get())) {
    add_slot();
}

std::shared_ptr<vk::Buffer> CommandRing::host_buffer(std::uint32_t index, std::uint64_t bytes, vk::MemoryIntent intent,
                                                     const std::string& what) {
    if (bytes > kPooledBytes) return nullptr;
    std::lock_guard lock(mutex_);
    Slot& slot = slots_[index];
    Pooled* best = nullptr;  // the smallest free one that fits
    for (Pooled& p : slot.host)
        if (!p.in_use && p.intent == intent && p.buffer->size() >= bytes && (!best || p.buffer->size() < best->buffer->size()))
            best = &p;
    if (!best) {
        if (slot.host.size() >= kPooledPerSlot) return nullptr;
        // Powers of two from 4 KiB, so that sizes that vary a little share buffers.
        const std::uint64_t size = std::max<std::uint64_t>(4096, std::bit_ceil(bytes));
        const VkBufferUsageFlags usage =
            intent == vk::MemoryIntent::upload ? VK_BUFFER_USAGE_TRANSFER_SRC_BIT : VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        slot.host.push_back({std::make_shared<vk::Buffer>(*device_, size, usage, intent, true, what), intent, false});
        best = &slot.host.back();
    }
    best->in_use = true;
    return best->buffer;
}

void CommandRing::add_slot() {
    const VkDevice d = device_->get();
    Slot& slot = slots_.emplace_back();
    VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = device_->queue_family();
    VkCommandPool pool = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateCommandPool(d, &pool_info, nullptr, &pool), "creating a command pool");
    slot.pool = vk::Handle<VkCommandPool>(pool, [d](VkCommandPool p) { vkDestroyCommandPool(d, p, nullptr); });

    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    alloc.commandPool = pool;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    VKATTN_CHECK(vkAllocateCommandBuffers(d, &alloc, &slot.commands), "allocating a command buffer");

    VkQueryPoolCreateInfo query_info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    query_info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    query_info.queryCount = 2;
    VkQueryPool queries = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateQueryPool(d, &query_info, nullptr, &queries), "creating a timestamp query pool");
    slot.queries = vk::Handle<VkQueryPool>(queries, [d](VkQueryPool q) { vkDestroyQueryPool(d, q, nullptr); });
}

CommandRing::~CommandRing() = default;

bool CommandRing::reusable(Slot& slot) {
    if (slot.recording) return false;
    if (!slot.pending || slot.pending->completed) return true;
    return poll(*slot.pending);
}

std::uint32_t CommandRing::acquire(std::chrono::milliseconds timeout) {
    std::lock_guard lock(mutex_);
    auto begin = [&](std::uint32_t index) {
        Slot& slot = slots_[index];
        slot.recording = true;
        slot.pending.reset();
        for (Pooled& p : slot.host) p.in_use = false;  // the last submission from this slot is complete
        VKATTN_CHECK(vkResetCommandBuffer(slot.commands, 0), "resetting a command buffer");
        VkCommandBufferBeginInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        info.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        VKATTN_CHECK(vkBeginCommandBuffer(slot.commands, &info), "beginning a command buffer");
        vkCmdResetQueryPool(slot.commands, slot.queries.get(), 0, 2);
        return index;
    };
    for (std::uint32_t i = 0; i < slots_.size(); ++i)
        if (reusable(slots_[i])) return begin(i);
    if (slots_.size() < kMaxSlots) {
        add_slot();
        return begin(static_cast<std::uint32_t>(slots_.size() - 1));
    }
    // Every slot is recording or in flight: wait for the oldest submission.
    std::optional<std::uint32_t> oldest;
    for (std::uint32_t i = 0; i < slots_.size(); ++i)
        if (!slots_[i].recording && (!oldest || slots_[i].serial < slots_[*oldest].serial)) oldest = i;
    if (!oldest)
        throw Error("every command buffer of this context (" + std::to_string(kMaxSlots) + ") is being recorded by an "
                    "unsubmitted Batch; submit or destroy one first.");
    if (!wait(*slots_[*oldest].pending, timeout))
        throw DeviceLost("a submission did not finish within " + std::to_string(timeout.count()) +
                         " ms while a new batch waited for its command buffer; the device is treated as hung.");
    return begin(*oldest);
}

void CommandRing::release(std::uint32_t index) {
    std::lock_guard lock(mutex_);
    Slot& slot = slots_[index];
    if (slot.recording) {
        vkEndCommandBuffer(slot.commands);  // discarded; the next acquire resets it
        slot.recording = false;
    }
}

std::shared_ptr<SubmissionState> CommandRing::submit(std::uint32_t index, InFlight work, bool timed,
                                                     bool simulate_timeout, std::mutex& queue_mutex) {
    Slot* slot_ptr = nullptr;
    {
        std::lock_guard lock(mutex_);
        slot_ptr = &slots_[index];
    }
    Slot& slot = *slot_ptr;
    // The slot stays `recording` (so no other batch takes it) until it is pending or has failed.
    auto state = std::make_shared<SubmissionState>();
    try {
        VKATTN_CHECK(vkEndCommandBuffer(slot.commands), "ending a command buffer");
        state->timed = timed;
        state->simulated_timeout = simulate_timeout;
        state->work = std::move(work);
        state->queries = slot.queries.get();
        state->fence = fences_->take(fences_);
        const VkFence fence = state->fence.get();
        VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        submit.commandBufferCount = 1;
        submit.pCommandBuffers = &slot.commands;
        std::lock_guard queue(queue_mutex);  // VkQueue is externally synchronised
        VKATTN_CHECK(vkQueueSubmit(device_->queue(), 1, &submit, fence), "submitting a command buffer");
    } catch (...) {
        std::lock_guard lock(mutex_);
        slot.recording = false;  // ended (or not begun again): the next acquire resets it
        throw;
    }
    std::lock_guard lock(mutex_);
    slot.recording = false;
    slot.serial = ++serial_;
    slot.pending = state;
    return state;
}

bool CommandRing::wait(SubmissionState& state, std::chrono::milliseconds timeout) {
    if (state.completed) return true;
    if (state.simulated_timeout) return false;
    VkFence fence = state.fence.get();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
    const VkResult waited = vkWaitForFences(device_->get(), 1, &fence, VK_TRUE, static_cast<std::uint64_t>(ns));
    if (waited == VK_TIMEOUT) return false;
    VKATTN_CHECK(waited, "waiting for a submission");
    complete(state);
    return true;
}

bool CommandRing::poll(SubmissionState& state) {
    if (state.completed) return true;
    if (state.simulated_timeout) return false;
    const VkResult status = vkGetFenceStatus(device_->get(), state.fence.get());
    if (status == VK_NOT_READY) return false;
    VKATTN_CHECK(status, "polling a submission");
    complete(state);
    return true;
}

void CommandRing::complete(SubmissionState& state) {
    std::lock_guard lock(state.mutex);
    if (state.completed) return;
    if (state.timed) {
        std::uint64_t stamps[2] = {0, 0};
        VKATTN_CHECK(vkGetQueryPoolResults(device_->get(), state.queries, 0, 2, sizeof(stamps),
                                           stamps, sizeof(std::uint64_t), VK_QUERY_RESULT_64_BIT),
                     "reading timestamps");
        state.gpu_ms = static_cast<double>(stamps[1] - stamps[0]) * device_->caps().timestamp_period_ns * 1e-6;
    }
    for (auto& host_work : state.work.on_complete) host_work();
    state.work = {};
    state.completed = true;
}

}  // namespace vkattn::detail

#include "vk/commands.hpp"

#include "vk/check.hpp"
#include "vk/device.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::vk {

CommandStream::CommandStream(const Device& device) : device_(&device) {
    const VkDevice d = device.get();
    VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = device.queue_family();
    VkCommandPool pool = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateCommandPool(d, &pool_info, nullptr, &pool), "creating the command pool");
    pool_ = Handle<VkCommandPool>(pool, [d](VkCommandPool p) { vkDestroyCommandPool(d, p, nullptr); });

    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    alloc.commandPool = pool;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    VKATTN_CHECK(vkAllocateCommandBuffers(d, &alloc, &buffer_), "allocating a command buffer");

    VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateFence(d, &fence_info, nullptr, &fence), "creating a fence");
    fence_ = Handle<VkFence>(fence, [d](VkFence f) { vkDestroyFence(d, f, nullptr); });

    VkQueryPoolCreateInfo query_info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    query_info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    query_info.queryCount = 2;
    VkQueryPool queries = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateQueryPool(d, &query_info, nullptr, &queries), "creating the timestamp query pool");
    queries_ = Handle<VkQueryPool>(queries, [d](VkQueryPool q) { vkDestroyQueryPool(d, q, nullptr); });
}

VkCommandBuffer CommandStream::begin() {
    VKATTN_CHECK(vkResetCommandBuffer(buffer_, 0), "resetting the command buffer");
    VkCommandBufferBeginInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    info.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    VKATTN_CHECK(vkBeginCommandBuffer(buffer_, &info), "beginning a command buffer");
    vkCmdResetQueryPool(buffer_, queries_.get(), 0, 2);
    recording_ = true;
    return buffer_;
}

void CommandStream::timestamp(std::uint32_t slot) {
    vkCmdWriteTimestamp(buffer_, slot == 0 ? VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT : VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                        queries_.get(), slot);
}

void CommandStream::barrier() {
    VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                            VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    vkCmdPipelineBarrier(buffer_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1,
                         &barrier, 0, nullptr, 0, nullptr);
}

void CommandStream::submit_and_wait(std::chrono::milliseconds timeout, bool simulate_timeout) {
    if (!recording_) throw Error("internal: submit without a recorded command buffer.");
    recording_ = false;
    // Host writes through mapped memory must be visible to the device, and device writes to the host.
    VKATTN_CHECK(vkEndCommandBuffer(buffer_), "ending the command buffer");
    const VkDevice d = device_->get();
    VkFence fence = fence_.get();
    VKATTN_CHECK(vkResetFences(d, 1, &fence), "resetting the fence");
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &buffer_;
    VKATTN_CHECK(vkQueueSubmit(device_->queue(), 1, &submit, fence), "submitting the dispatch chain");
    // The test hook leaves the submission in flight, as a real timeout does.
    if (simulate_timeout)
        throw DeviceLost("a fence timeout was simulated (ContextOptions::simulate_timeout_on_submission); the "
                         "device is treated as hung.");
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
    const VkResult waited = vkWaitForFences(d, 1, &fence, VK_TRUE, static_cast<std::uint64_t>(ns));
    if (waited == VK_TIMEOUT)
        throw DeviceLost("the dispatch chain did not finish within " + std::to_string(timeout.count()) +
                         " ms (vkWaitForFences returned VK_TIMEOUT); the device is treated as hung.");
    VKATTN_CHECK(waited, "waiting for the dispatch chain");
}

double CommandStream::elapsed_ms() const {
    std::uint64_t stamps[2] = {0, 0};
    VKATTN_CHECK(vkGetQueryPoolResults(device_->get(), queries_.get(), 0, 2, sizeof(stamps), stamps,
                                       sizeof(std::uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                 "reading timestamps");
    return static_cast<double>(stamps[1] - stamps[0]) * device_->caps().timestamp_period_ns * 1e-6;
}

}  // namespace vkattn::vk

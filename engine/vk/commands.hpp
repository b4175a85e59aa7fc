// One command buffer recorded and submitted once per request, with a fence wait that times out
// instead of hanging, and GPU timestamps around the dispatch chain.
#pragma once

#include <chrono>
#include <cstdint>

#include <vulkan/vulkan.h>

#include "vk/handle.hpp"

namespace vkattn::vk {

class Device;

class CommandStream {
public:
    explicit CommandStream(const Device& device);

    VkCommandBuffer begin();  // resets and begins recording
    void timestamp(std::uint32_t slot);  // slot 0 = start, 1 = end
    // Makes every earlier write (shader or transfer) visible to every later read or write.
    void barrier();
    // simulate_timeout: report VK_TIMEOUT without waiting (ContextOptions::simulate_timeout_on_submission).
    void submit_and_wait(std::chrono::milliseconds timeout, bool simulate_timeout);
    double elapsed_ms() const;  // between the two timestamps of the last submission

private:
    const Device* device_;
    Handle<VkCommandPool> pool_;
    VkCommandBuffer buffer_ = VK_NULL_HANDLE;
    Handle<VkFence> fence_;
    Handle<VkQueryPool> queries_;
    bool recording_ = false;
};

}  // namespace vkattn::vk

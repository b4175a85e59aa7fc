// A recorded dispatch chain: every dispatch's parameter block written and descriptor set allocated
// and written once, so replaying it into a command buffer is binds and dispatches only. A plan
// keeps one per set of tensor bindings (a decode loop that reuses its tensors writes no descriptor
// after its first step); the host API makes one per call. The program owns the device scratch its
// dispatches use.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "attention/dispatch.hpp"
#include "vk/buffer.hpp"
#include "vk/handle.hpp"

namespace vkattn::detail {

class Runtime;

class Program {
public:
    explicit Program(Runtime& runtime);
    // Hands the descriptor pools, parameter blocks, views and scratch to the runtime when the
    // context was lost: a submission that replayed the program may still be running.
    ~Program();
    Program(const Program&) = delete;
    Program& operator=(const Program&) = delete;

    void dispatch(const Dispatch& dispatch);
    // Every earlier write (shader or transfer) visible to every later read or write.
    void barrier();
    // Device memory the program owns, counted against the device-memory budget (ResourceLimit
    // naming `what` beyond it).
    const vk::Buffer& scratch(std::uint64_t bytes, const std::string& what);

    void replay(VkCommandBuffer commands) const;
    std::uint64_t scratch_bytes() const { return scratch_bytes_; }

private:
    struct Block {
        vk::Handle<VkDescriptorPool> pool;
        vk::Buffer params;
        std::uint32_t capacity = 0, used = 0;
    };
    struct Step {
        VkPipeline pipeline = VK_NULL_HANDLE;  // null: a barrier
        VkPipelineLayout layout = VK_NULL_HANDLE;
        VkDescriptorSet set = VK_NULL_HANDLE;
        std::array<std::uint32_t, 3> groups{};
    };
    void add_block(std::uint32_t capacity);

    Runtime* runtime_;
    std::uint64_t slot_bytes_;
    std::vector<Block> blocks_;
    std::vector<vk::Handle<VkBufferView>> views_;
    std::deque<vk::Buffer> scratch_;
    std::uint64_t scratch_bytes_ = 0;
    std::vector<Step> steps_;
};

}  // namespace vkattn::detail

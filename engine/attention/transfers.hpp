// Moving host tensors to the device and results back: zero-copy through mapped device memory where
// the device allows it (integrated GPUs, lavapipe), staging buffers and copy commands otherwise.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vk/buffer.hpp"

namespace vkattn::detail {

class Runtime;

class Transfers {
public:
    explicit Transfers(Runtime& runtime);
    // Hands the buffers to the runtime when the submission using them was lost (it may still run).
    ~Transfers();
    Transfers(const Transfers&) = delete;
    Transfers& operator=(const Transfers&) = delete;

    // A device buffer filled with `bytes` of host data (copied now, or at record_uploads).
    const vk::Buffer& input(const void* host, std::uint64_t bytes, const std::string& what);
    // A device buffer that is read back after the run; poisoned with NaN when the runtime asks.
    const vk::Buffer& output(std::uint64_t bytes, std::uint32_t nan_pattern, const std::string& what);
    // A device-only buffer.
    const vk::Buffer& scratch(std::uint64_t bytes, const std::string& what);

    void record_uploads(VkCommandBuffer commands);    // before the compute work
    void record_downloads(VkCommandBuffer commands);  // after it
    // The bytes of an output buffer, valid once the submission has completed.
    const void* result(const vk::Buffer& output) const;
    std::uint64_t device_bytes() const { return device_bytes_; }

private:
    const vk::Buffer& device_buffer(std::uint64_t bytes, const std::string& what);
    Runtime* runtime_;
    std::deque<vk::Buffer> buffers_;  // deque: references stay valid as it grows
    struct Copy {
        const vk::Buffer* from;
        const vk::Buffer* to;
    };
    std::vector<Copy> uploads_, downloads_;
    std::vector<std::pair<const vk::Buffer*, std::uint32_t>> poison_;
    std::vector<std::pair<const vk::Buffer*, const vk::Buffer*>> results_;  // device -> readable
    std::uint64_t device_bytes_ = 0;
};

}  // namespace vkattn::detail

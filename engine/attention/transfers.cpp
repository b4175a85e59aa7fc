#include "attention/transfers.hpp"

#include <cstring>

#include "runtime.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

constexpr VkBufferUsageFlags kTensorUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                            VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                                            VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

std::uint64_t padded(std::uint64_t bytes) { return (bytes + 15) / 16 * 16 + 16; }

}  // namespace

Transfers::Transfers(Runtime& runtime) : runtime_(&runtime) {}

Transfers::~Transfers() {
    if (runtime_->lost()) runtime_->keep_until_idle(std::make_shared<std::deque<vk::Buffer>>(std::move(buffers_)));
}

const vk::Buffer& Transfers::device_buffer(std::uint64_t bytes, const std::string& what) {
    // The planners refuse oversized requests before allocating; this catches whatever they did not
    // foresee, while the buffers allocated so far are freed by unwinding.
    const std::uint64_t heap = runtime_->device_memory_bytes();
    if (device_bytes_ + padded(bytes) > heap)
        throw ResourceLimit(what + " would bring this request's device memory to " +
                            std::to_string(device_bytes_ + padded(bytes)) + " bytes, above the device's largest "
                            "device-local heap of " + std::to_string(heap) + " bytes.");
    buffers_.emplace_back(runtime_->device(), padded(bytes), kTensorUsage, vk::MemoryIntent::device_local,
                          runtime_->zero_copy(), what);
    device_bytes_ += buffers_.back().size();
    return buffers_.back();
}

const vk::Buffer& Transfers::input(const void* host, std::uint64_t bytes, const std::string& what) {
    const vk::Buffer& target = device_buffer(bytes, what);
    if (target.mapped()) {
        std::memcpy(target.mapped(), host, bytes);
        return target;
    }
    buffers_.emplace_back(runtime_->device(), padded(bytes), VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                          vk::MemoryIntent::upload, true, "the staging buffer of " + what);
    std::memcpy(buffers_.back().mapped(), host, bytes);
    uploads_.push_back({&buffers_.back(), &target});
    return target;
}

const vk::Buffer& Transfers::output(std::uint64_t bytes, std::uint32_t nan_pattern, const std::string& what) {
    const vk::Buffer& target = device_buffer(bytes, what);
    if (runtime_->poison_outputs()) poison_.push_back({&target, nan_pattern});
    if (target.mapped()) {
        results_.push_back({&target, &target});
        return target;
    }
    buffers_.emplace_back(runtime_->device(), padded(bytes), VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                          vk::MemoryIntent::readback, true, "the readback buffer of " + what);
    downloads_.push_back({&target, &buffers_.back()});
    results_.push_back({&target, &buffers_.back()});
    return target;
}

const vk::Buffer& Transfers::scratch(std::uint64_t bytes, const std::string& what) {
    return device_buffer(bytes, what);
}

void Transfers::record_uploads(VkCommandBuffer commands) {
    for (const auto& c : uploads_) {
        const VkBufferCopy region{0, 0, c.from->size()};
        vkCmdCopyBuffer(commands, c.from->get(), c.to->get(), 1, &region);
    }
    for (const auto& [buffer, pattern] : poison_) vkCmdFillBuffer(commands, buffer->get(), 0, VK_WHOLE_SIZE, pattern);
}

void Transfers::record_downloads(VkCommandBuffer commands) {
    for (const auto& c : downloads_) {
        const VkBufferCopy region{0, 0, c.from->size()};
        vkCmdCopyBuffer(commands, c.from->get(), c.to->get(), 1, &region);
    }
}

const void* Transfers::result(const vk::Buffer& output) const {
    for (const auto& [device, readable] : results_)
        if (device == &output) return readable->mapped();
    throw Error("internal: result() of a buffer that is not an output.");
}

}  // namespace vkattn::detail

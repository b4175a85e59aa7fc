// Recording one compute dispatch: its parameter block goes into a slot of a uniform buffer, its
// bindings into a fresh descriptor set (types reflected from the shader), then bind and dispatch.
#pragma once

#include <array>
#include <cstdint>
#include <variant>
#include <vector>

#include <vulkan/vulkan.h>

#include "attention/params.hpp"
#include "attention/slicing.hpp"
#include "vk/buffer.hpp"
#include "vk/handle.hpp"
#include "vk/pipeline.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::detail {

struct Binding {
    std::uint32_t binding = 0;
    const vk::Buffer* buffer = nullptr;
    std::uint64_t offset = 0;
    std::uint64_t range = 0;
    DType texel_dtype = DType::f32;  // the view format when the shader reads it as texels
};

// A slice of a buffer at a binding; `texel` is the view format when the shader reads texels.
inline Binding bind(std::uint32_t binding, const vk::Buffer& buffer, const Slice& slice, DType texel = DType::f32) {
    return {binding, &buffer, slice.offset, slice.range, texel};
}

// A kernel's parameter block: the struct of its shader (the recorder checks the kernel's name).
using KernelParams = std::variant<BmmParams, SoftmaxParams, FlashParams, CombineParams>;

struct Dispatch {
    const vk::Kernel* kernel = nullptr;
    KernelParams params;
    std::vector<Binding> bindings;  // binding 0 (the parameter block) is added by the recorder
    std::array<std::uint32_t, 3> groups{1, 1, 1};
};

class Runtime;

// Parameter blocks and descriptor sets come from blocks of slots allocated as dispatches are
// recorded (each block twice the last), so callers need not count their dispatches up front.
class DispatchRecorder {
public:
    explicit DispatchRecorder(Runtime& runtime);
    // Hands the descriptor pools, parameter blocks and views to the runtime when the submission was
    // lost: the device may still be reading them.
    ~DispatchRecorder();
    DispatchRecorder(const DispatchRecorder&) = delete;
    DispatchRecorder& operator=(const DispatchRecorder&) = delete;
    void record(VkCommandBuffer commands, const Dispatch& dispatch);

private:
    struct Block {
        vk::Handle<VkDescriptorPool> pool;
        vk::Buffer params;
        std::uint32_t capacity = 0, used = 0;
    };
    void add_block(std::uint32_t capacity);

    Runtime* runtime_;
    const vk::Device* device_;
    std::uint64_t slot_bytes_;
    std::vector<Block> blocks_;
    std::vector<vk::Handle<VkBufferView>> views_;
};

}  // namespace vkattn::detail

// Recording one compute dispatch: its parameter block goes into a slot of a uniform buffer, its
// bindings into a fresh descriptor set (types reflected from the shader), then bind and dispatch.
#pragma once

#include <array>
#include <cstdint>
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

struct Dispatch {
    const vk::Kernel* kernel = nullptr;
    Params params;
    std::vector<Binding> bindings;  // binding 0 (the parameter block) is added by the recorder
    std::array<std::uint32_t, 3> groups{1, 1, 1};
};

class Runtime;

class DispatchRecorder {
public:
    DispatchRecorder(Runtime& runtime, std::uint32_t max_dispatches);
    // Hands the descriptor pool, parameter blocks and views to the runtime when its submission was
    // lost: the device may still be reading them.
    ~DispatchRecorder();
    DispatchRecorder(const DispatchRecorder&) = delete;
    DispatchRecorder& operator=(const DispatchRecorder&) = delete;
    void record(VkCommandBuffer commands, const Dispatch& dispatch);

private:
    Runtime* runtime_;
    const vk::Device* device_;
    std::uint32_t capacity_;
    std::uint32_t used_ = 0;
    std::uint64_t slot_bytes_;
    vk::Handle<VkDescriptorPool> pool_;
    vk::Buffer params_;
    std::vector<vk::Handle<VkBufferView>> views_;
};

}  // namespace vkattn::detail

// One compute dispatch as the paths describe it: the kernel, its parameter block, the buffer ranges
// it binds and its grid. plan/program.hpp turns dispatches into descriptor sets and commands.
#pragma once

#include <array>
#include <cstdint>
#include <variant>
#include <vector>

#include <vulkan/vulkan.h>

#include "attention/params.hpp"
#include "attention/slicing.hpp"
#include "tensor/storage_rules.hpp"
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
    TexelView view = TexelView::rgba32f;  // the view's format when the shader reads it as texels
};

// A slice of a buffer at a binding; `view` is the view's format when the shader reads texels.
inline Binding bind(std::uint32_t binding, const vk::Buffer& buffer, const Slice& slice,
                    TexelView view = TexelView::rgba32f) {
    return {binding, &buffer, slice.offset, slice.range, view};
}

// A kernel's parameter block: the struct of its shader (the recorder checks the kernel's name).
using KernelParams =
    std::variant<BmmParams, SoftmaxParams, FlashParams, CombineParams, AppendParams, BackwardParams, CopyParams,
                 ClockProbeParams>;

struct Dispatch {
    const vk::Kernel* kernel = nullptr;
    KernelParams params;
    std::vector<Binding> bindings;  // binding 0 (the parameter block) is added by the recorder
    std::array<std::uint32_t, 3> groups{1, 1, 1};
};

}  // namespace vkattn::detail

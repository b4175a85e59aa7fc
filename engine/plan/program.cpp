#include "plan/program.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>

#include "vk/check.hpp"
#include "runtime.hpp"
#include "vk/device.hpp"
#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"
#include "tensor/storage_rules.hpp"

namespace vkattn::detail {

Program::Program(Runtime& runtime) : runtime_(&runtime) {
    const std::uint64_t align = runtime.device().caps().min_uniform_offset_alignment;
    const std::uint64_t largest = std::max({sizeof(BmmParams), sizeof(SoftmaxParams), sizeof(FlashParams),
                                            sizeof(CombineParams), sizeof(AppendParams), sizeof(BackwardParams)});
    slot_bytes_ = (largest + align - 1) / align * align;
}

void Program::add_block(std::uint32_t capacity) {
    Block block;
    block.capacity = capacity;
    block.params = vk::Buffer(runtime_->device(), slot_bytes_ * capacity, VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT,
                              vk::MemoryIntent::upload, true, "the parameter blocks");
    // Every vkattn shader has at most 16 buffer bindings besides its parameter block (the paged
    // flash variants); size the pool for the worst case.
    const std::uint32_t n = capacity * 16;
    const VkDescriptorPoolSize sizes[] = {{VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, capacity},
                                          {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, n},
                                          {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, n}};
    VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    info.maxSets = capacity;
    info.poolSizeCount = 3;
    info.pPoolSizes = sizes;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    const VkDevice d = runtime_->device().get();
    VKATTN_CHECK(vkCreateDescriptorPool(d, &info, nullptr, &pool), "creating a descriptor pool");
    block.pool = vk::Handle<VkDescriptorPool>(pool, [d](VkDescriptorPool p) { vkDestroyDescriptorPool(d, p, nullptr); });
    blocks_.push_back(std::move(block));
}

Program::~Program() {
    if (!runtime_->lost()) return;
    struct Kept {
        std::vector<vk::Handle<VkBufferView>> views;
        std::vector<Block> blocks;
        std::deque<vk::Buffer> scratch;
    };
    runtime_->keep_until_idle(
        std::make_shared<Kept>(Kept{std::move(views_), std::move(blocks_), std::move(scratch_)}));
}

const vk::Buffer& Program::scratch(std::uint64_t bytes, const std::string& what) {
    const std::uint64_t padded = allocated_bytes(bytes);
    const std::uint64_t heap = runtime_->device_memory_bytes();
    if (scratch_bytes_ + padded > heap)
        throw ResourceLimit(what + " would bring this request's device memory to " +
                            std::to_string(scratch_bytes_ + padded) + " bytes, above the device's largest "
                            "device-local heap of " + std::to_string(heap) + " bytes.");
    scratch_.emplace_back(runtime_->device(), padded, kTensorUsage, vk::MemoryIntent::device_local, false, what);
    scratch_bytes_ += padded;
    return scratch_.back();
}

void Program::barrier() { steps_.push_back({}); }

void Program::replay(VkCommandBuffer commands) const {
    for (const Step& step : steps_) {
        if (step.pipeline == VK_NULL_HANDLE) {
            VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
            barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
            barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                    VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
            constexpr VkPipelineStageFlags kStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
            vkCmdPipelineBarrier(commands, kStages, kStages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
            continue;
        }
        vkCmdBindPipeline(commands, VK_PIPELINE_BIND_POINT_COMPUTE, step.pipeline);
        vkCmdBindDescriptorSets(commands, VK_PIPELINE_BIND_POINT_COMPUTE, step.layout, 0, 1, &step.set, 0, nullptr);
        vkCmdDispatch(commands, step.groups[0], step.groups[1], step.groups[2]);
    }
}

void Program::dispatch(const Dispatch& dispatch) {
    if (blocks_.empty() || blocks_.back().used == blocks_.back().capacity)
        add_block(blocks_.empty() ? 8u : 2u * blocks_.back().capacity);
    Block& block = blocks_.back();
    const VkDevice d = runtime_->device().get();
    const vk::Kernel& kernel = *dispatch.kernel;
    // The parameter block must be the one of the kernel's shader ("flash" for "flash_texel_o32",
    // "kv_append" for "kv_append" itself).
    const auto [params, params_bytes, shader] = std::visit(
        [](const auto& p) { return std::tuple{static_cast<const void*>(&p), sizeof(p), p.shader}; }, dispatch.params);
    if (kernel.name() != shader && !kernel.name().starts_with(std::string(shader) + "_"))
        throw Error("internal: " + kernel.name() + " was given the parameter block of " + std::string(shader) + ".");
    const std::uint64_t slot = block.used++ * slot_bytes_;
    std::memcpy(static_cast<char*>(block.params.mapped()) + slot, params, params_bytes);

    const VkDescriptorSetLayout layout = kernel.set_layout();
    VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    alloc.descriptorPool = block.pool.get();
    alloc.descriptorSetCount = 1;
    alloc.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    VKATTN_CHECK(vkAllocateDescriptorSets(d, &alloc, &set), "allocating a descriptor set for " + kernel.name());

    // Reserve first: the write structs point into these vectors.
    std::vector<VkDescriptorBufferInfo> buffer_infos;
    std::vector<VkBufferView> view_handles;
    buffer_infos.reserve(kernel.bindings().size());
    view_handles.reserve(kernel.bindings().size());
    std::vector<VkWriteDescriptorSet> writes;
    for (const auto& reflected : kernel.bindings()) {
        VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        w.dstSet = set;
        w.dstBinding = reflected.binding;
        w.descriptorCount = 1;
        w.descriptorType = reflected.type;
        if (reflected.binding == 0) {
            buffer_infos.push_back({block.params.get(), slot, params_bytes});
            w.pBufferInfo = &buffer_infos.back();
            writes.push_back(w);
            continue;
        }
        const Binding* b = nullptr;
        for (const auto& candidate : dispatch.bindings)
            if (candidate.binding == reflected.binding) b = &candidate;
        if (b == nullptr)
            throw Error("internal: binding " + std::to_string(reflected.binding) + " of " + kernel.name() +
                        " was not provided.");
        if (reflected.type == VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER) {
            VkBufferViewCreateInfo view_info{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
            view_info.buffer = b->buffer->get();
            view_info.format = b->view == TexelView::rgba32f   ? VK_FORMAT_R32G32B32A32_SFLOAT
                               : b->view == TexelView::rgba16f ? VK_FORMAT_R16G16B16A16_SFLOAT
                                                               : VK_FORMAT_R32_UINT;
            view_info.offset = b->offset;
            const std::uint64_t texel = view_bytes(b->view);
            view_info.range = b->range / texel * texel;
            VkBufferView view = VK_NULL_HANDLE;
            VKATTN_CHECK(vkCreateBufferView(d, &view_info, nullptr, &view), "creating a texel view for " + kernel.name());
            views_.emplace_back(view, [d](VkBufferView v) { vkDestroyBufferView(d, v, nullptr); });
            view_handles.push_back(view);
            w.pTexelBufferView = &view_handles.back();
        } else {
            buffer_infos.push_back({b->buffer->get(), b->offset, b->range});
            w.pBufferInfo = &buffer_infos.back();
        }
        writes.push_back(w);
    }
    vkUpdateDescriptorSets(d, static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
    steps_.push_back({kernel.pipeline(), kernel.layout(), set, dispatch.groups});
}

}  // namespace vkattn::detail

#include "vk/pipeline.hpp"

#include <fstream>
#include <unistd.h>
#include <iterator>

#include "vk/check.hpp"
#include "vk/device.hpp"
#include "vk/spirv_patch.hpp"
#include "vkattn/errors.hpp"
#include "shaders/embedded_shaders.hpp"

namespace vkattn::vk {

std::span<const std::uint32_t> embedded_shader(const std::string& name) {
    for (const auto& s : shaders::embedded())
        if (s.name == name) return {s.words, s.count};
    throw Error("internal: no embedded shader named " + name + ".");
}

bool has_embedded_shader(const std::string& name) {
    for (const auto& s : shaders::embedded())
        if (s.name == name) return true;
    return false;
}

bool matrix_unit_shaders_built() { return has_embedded_shader("flash_coopmat_units_o16"); }
bool matrix_part_shaders_built() { return has_embedded_shader("flash_coopmat_units_parts_o16"); }
bool bf16_unit_shaders_built() { return has_embedded_shader("flash_coopmat_units_bf16_obf16"); }
bool workgroup_matrix_shaders_built() { return has_embedded_shader("flash_cm2_o32"); }
bool workgroup_bf16_shaders_built() { return has_embedded_shader("flash_cm2_bf16_o32"); }

Kernel::Kernel(const Device& device, VkPipelineCache cache, const KernelKey& key) : name_(key.shader) {
    const VkDevice d = device.get();
    const auto embedded = embedded_shader(key.shader);
    bindings_ = reflect_bindings(embedded);
    // Where the device can keep IEEE infinities and NaN, say so: NaN inputs then propagate as
    // documented (docs/SEMANTICS.md) instead of as the compiler pleases.
    // And where it can reconverge subgroups after a per-lane branch, ask it to (vk/spirv_patch.hpp).
    const SpirvPatch patch{.preserve_inf_nan_f32 = device.caps().preserve_inf_nan_f32,
                           .maximal_reconvergence = device.caps().maximal_reconvergence};
    std::vector<std::uint32_t> patched;
    if (patch.any()) patched = patch_spirv(embedded, patch);
    const std::span<const std::uint32_t> spirv = patched.empty() ? embedded : std::span<const std::uint32_t>(patched);

    VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    module_info.codeSize = spirv.size_bytes();
    module_info.pCode = spirv.data();
    VkShaderModule module = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateShaderModule(d, &module_info, nullptr, &module), "loading shader " + name_);
    module_ = Handle<VkShaderModule>(module, [d](VkShaderModule m) { vkDestroyShaderModule(d, m, nullptr); });

    std::vector<VkDescriptorSetLayoutBinding> layout_bindings;
    for (const auto& b : bindings_)
        layout_bindings.push_back({b.binding, b.type, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr});
    VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    set_info.bindingCount = static_cast<std::uint32_t>(layout_bindings.size());
    set_info.pBindings = layout_bindings.data();
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateDescriptorSetLayout(d, &set_info, nullptr, &set_layout),
                 "creating the descriptor layout of " + name_);
    set_layout_ = Handle<VkDescriptorSetLayout>(
        set_layout, [d](VkDescriptorSetLayout l) { vkDestroyDescriptorSetLayout(d, l, nullptr); });

    VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    layout_info.setLayoutCount = 1;
    layout_info.pSetLayouts = &set_layout;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreatePipelineLayout(d, &layout_info, nullptr, &layout), "creating the pipeline layout of " + name_);
    layout_ = Handle<VkPipelineLayout>(layout, [d](VkPipelineLayout l) { vkDestroyPipelineLayout(d, l, nullptr); });

    std::vector<VkSpecializationMapEntry> entries;
    std::vector<std::uint32_t> values;
    for (const auto& c : key.constants) {
        entries.push_back({c.id, static_cast<std::uint32_t>(values.size() * 4), 4});
        values.push_back(c.value);
    }
    VkSpecializationInfo spec{};
    spec.mapEntryCount = static_cast<std::uint32_t>(entries.size());
    spec.pMapEntries = entries.data();
    spec.dataSize = values.size() * 4;
    spec.pData = values.data();

    VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    info.stage.pSpecializationInfo = &spec;
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT required{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT};
    if (key.required_subgroup_size != 0) {
        required.requiredSubgroupSize = key.required_subgroup_size;
        info.stage.pNext = &required;
        info.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT;
    }
    info.layout = layout;
    if (device.caps().kernel_statistics) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    VkPipeline pipeline = VK_NULL_HANDLE;
    VKATTN_CHECK(vkCreateComputePipelines(d, cache, 1, &info, nullptr, &pipeline), "building pipeline " + name_);
    pipeline_ = Handle<VkPipeline>(pipeline, [d](VkPipeline p) { vkDestroyPipeline(d, p, nullptr); });
    if (device.caps().kernel_statistics) {
        std::string constants;
        for (const auto& c : key.constants) {
            if (!constants.empty()) constants += ' ';
            constants += std::to_string(c.id) + "=" + std::to_string(c.value);
        }
        statistics_ = read_pipeline_statistics(d, pipeline, key.shader, constants);
    }
}

KernelCache::KernelCache(const Device& device, std::filesystem::path file)
    : device_(&device), file_(std::move(file)) {
    std::vector<char> data;
    if (!file_.empty()) {
        std::ifstream in(file_, std::ios::binary);
        if (in) data.assign(std::istreambuf_iterator<char>(in), {});
    }
    // The driver validates the header (vendor, device, cache UUID) and ignores a stale or foreign
    // blob; we also key the file name by device and driver so caches do not fight.
    VkPipelineCacheCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    info.initialDataSize = data.size();
    info.pInitialData = data.empty() ? nullptr : data.data();
    VkPipelineCache cache = VK_NULL_HANDLE;
    const VkDevice d = device.get();
    if (vkCreatePipelineCache(d, &info, nullptr, &cache) != VK_SUCCESS) {
        info.initialDataSize = 0;  // a corrupt file: start empty rather than fail
        info.pInitialData = nullptr;
        VKATTN_CHECK(vkCreatePipelineCache(d, &info, nullptr, &cache), "creating the pipeline cache");
    }
    cache_ = Handle<VkPipelineCache>(cache, [d](VkPipelineCache c) { vkDestroyPipelineCache(d, c, nullptr); });
}

KernelCache::~KernelCache() { save(); }

const Kernel& KernelCache::get(const KernelKey& key) {
    std::lock_guard lock(mutex_);
    auto it = kernels_.find(key);
    if (it == kernels_.end())
        it = kernels_.emplace(key, std::make_unique<Kernel>(*device_, cache_.get(), key)).first;
    return *it->second;
}

std::vector<const Kernel*> KernelCache::built() {
    std::lock_guard lock(mutex_);
    std::vector<const Kernel*> out;
    for (const auto& entry : kernels_) out.push_back(entry.second.get());
    return out;
}

void KernelCache::save() const {
    if (file_.empty() || !cache_) return;
    std::size_t size = 0;
    if (vkGetPipelineCacheData(device_->get(), cache_.get(), &size, nullptr) != VK_SUCCESS || size == 0) return;
    std::vector<char> data(size);
    if (vkGetPipelineCacheData(device_->get(), cache_.get(), &size, data.data()) != VK_SUCCESS) return;
    std::error_code ec;
    std::filesystem::create_directories(file_.parent_path(), ec);
    // Several processes may save at once (ctest -j): a temporary name per process, then an atomic rename.
    const auto tmp = file_.string() + ".tmp" + std::to_string(::getpid()) + "-" +
                     std::to_string(reinterpret_cast<std::uintptr_t>(this));
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return;
        out.write(data.data(), static_cast<std::streamsize>(size));
        if (!out) return;
    }
    std::filesystem::rename(tmp, file_, ec);
    if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace vkattn::vk

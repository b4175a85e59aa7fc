#include "vk/pipeline_statistics.hpp"

namespace vkattn::vk {

std::vector<KernelStatistics> read_pipeline_statistics(VkDevice device, VkPipeline pipeline, const std::string& kernel,
                                                       const std::string& constants) {
    // Extension entry points: the loader exports only core ones.
    const auto properties_of = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
        vkGetDeviceProcAddr(device, "vkGetPipelineExecutablePropertiesKHR"));
    const auto statistics_of = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
        vkGetDeviceProcAddr(device, "vkGetPipelineExecutableStatisticsKHR"));
    if (!properties_of || !statistics_of) return {};

    VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
    info.pipeline = pipeline;
    std::uint32_t count = 0;
    if (properties_of(device, &info, &count, nullptr) != VK_SUCCESS || count == 0) return {};
    std::vector<VkPipelineExecutablePropertiesKHR> executables(count, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR});
    if (properties_of(device, &info, &count, executables.data()) != VK_SUCCESS) return {};

    std::vector<KernelStatistics> out;
    for (std::uint32_t e = 0; e < count; ++e) {
        VkPipelineExecutableInfoKHR which{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
        which.pipeline = pipeline;
        which.executableIndex = e;
        std::uint32_t n = 0;
        if (statistics_of(device, &which, &n, nullptr) != VK_SUCCESS) continue;
        std::vector<VkPipelineExecutableStatisticKHR> stats(n, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
        if (statistics_of(device, &which, &n, stats.data()) != VK_SUCCESS) continue;
        KernelStatistics executable{.kernel = kernel, .constants = constants, .executable = executables[e].name,
                                    .subgroup_size = executables[e].subgroupSize};
        for (std::uint32_t s = 0; s < n; ++s) {
            double value = 0;
            switch (stats[s].format) {
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: value = stats[s].value.b32 ? 1 : 0; break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: value = static_cast<double>(stats[s].value.i64); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: value = static_cast<double>(stats[s].value.u64); break;
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: value = stats[s].value.f64; break;
                default: continue;
            }
            executable.values.push_back({.name = stats[s].name, .description = stats[s].description, .value = value});
        }
        out.push_back(std::move(executable));
    }
    return out;
}

}  // namespace vkattn::vk

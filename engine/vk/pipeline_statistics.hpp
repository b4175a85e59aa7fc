// A compute pipeline's statistics as its driver reports them (VK_KHR_pipeline_executable_properties):
// read once, right after the pipeline is built with VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vkattn/kernel_statistics.hpp"

namespace vkattn::vk {

struct ExecutableStatistics {
    std::string executable;
    std::uint32_t subgroup_size = 0;
    std::vector<KernelStatistic> values;
};

// Every executable of `pipeline` with its statistics; empty where the driver reports none.
std::vector<ExecutableStatistics> read_pipeline_statistics(VkDevice device, VkPipeline pipeline);

}  // namespace vkattn::vk

// A compute pipeline's statistics as its driver reports them (VK_KHR_pipeline_executable_properties):
// read once, right after the pipeline is built with VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR.
#pragma once

#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vkattn/kernel_statistics.hpp"

namespace vkattn::vk {

// Every executable of `pipeline` with its statistics, named `kernel` with `constants`; empty where
// the driver reports none.
std::vector<KernelStatistics> read_pipeline_statistics(VkDevice device, VkPipeline pipeline, const std::string& kernel,
                                                       const std::string& constants);

}  // namespace vkattn::vk

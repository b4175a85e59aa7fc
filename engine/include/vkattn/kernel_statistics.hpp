// What the driver's compiler made of each kernel (VK_KHR_pipeline_executable_properties): registers
// per invocation, spills, shared memory, instruction counts, in the driver's own names. The numbers
// a GPU kernel is designed against (docs/design/GPU_KERNELS.md) and the first thing to read when a
// kernel is slower than its counts say. Captured only where ContextOptions::kernel_statistics (or
// $VKATTN_KERNEL_STATISTICS=1) asked for it and the device offers pipelineExecutableInfo;
// `vk-attn bench --kernel-statistics` prints them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vkattn/context.hpp"

namespace vkattn {

struct KernelStatistic {
    std::string name;         // the driver's, e.g. "Register Count" (NVIDIA), "VGPRs" (RADV)
    std::string description;  // the driver's
    double value = 0;         // booleans as 0/1
};

struct KernelStatistics {
    std::string kernel;       // the shader, e.g. "flash_coopmat_units_o16"
    std::string constants;    // its specialization constants, "id=value" separated by spaces
    std::string executable;   // the driver's name for the compiled executable
    std::uint32_t subgroup_size = 0;
    std::vector<KernelStatistic> values;
};

// Every kernel this context has built so far, in the order of their keys; empty where statistics
// are not captured (kernel_statistics_captured says which).
std::vector<KernelStatistics> kernel_statistics(Context& context);
bool kernel_statistics_captured(Context& context);

}  // namespace vkattn

#include "vkattn/kernel_statistics.hpp"

#include "runtime.hpp"
#include "vk/device.hpp"
#include "vk/pipeline.hpp"

namespace vkattn {

bool kernel_statistics_captured(Context& context) {
    return detail::ContextAccess::runtime(context).device().caps().kernel_statistics;
}

std::vector<KernelStatistics> kernel_statistics(Context& context) {
    std::vector<KernelStatistics> out;
    for (const auto& [key, kernel] : detail::ContextAccess::runtime(context).kernels().built()) {
        std::string constants;
        for (const auto& c : key.constants)
            constants += (constants.empty() ? "" : " ") + std::to_string(c.id) + "=" + std::to_string(c.value);
        for (const auto& e : kernel->statistics())
            out.push_back({.kernel = key.shader, .constants = constants, .executable = e.executable,
                           .subgroup_size = e.subgroup_size, .values = e.values});
    }
    return out;
}

}  // namespace vkattn

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
    for (const vk::Kernel* kernel : detail::ContextAccess::runtime(context).kernels().built())
        out.insert(out.end(), kernel->statistics().begin(), kernel->statistics().end());
    return out;
}

}  // namespace vkattn

// A Batch that records into the caller's command buffer (vkattn/vulkan.hpp).
#include "context_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn {

Batch record_into(Context& context, VkCommandBuffer commands) {
    if (commands == VK_NULL_HANDLE) throw InvalidArgument("commands", "it is VK_NULL_HANDLE.");
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    Batch batch = detail::BatchAccess::make(runtime);
    detail::BatchAccess::state(batch).external = commands;
    detail::BatchAccess::state(batch).tuning = &detail::ContextAccess::state(context).tuning;
    return batch;
}

}  // namespace vkattn

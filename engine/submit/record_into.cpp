// A Batch that records into the caller's command buffer (vkattn/vulkan.hpp).
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn {

Batch record_into(Context& context, VkCommandBuffer commands) {
    if (commands == VK_NULL_HANDLE) throw InvalidArgument("commands", "it is VK_NULL_HANDLE.");
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    Batch batch(context);  // with the context's tuner winners
    detail::BatchAccess::state(batch).external = commands;
    return batch;
}

}  // namespace vkattn

// Every VkResult goes through check(): a failure becomes a typed exception naming the call, the
// VkResult and what we were doing (DeviceLost for a lost device, ResourceLimit for out-of-memory).
#pragma once

#include <string>

#include <vulkan/vulkan.h>

namespace vkattn::vk {

const char* result_name(VkResult result);
void check(VkResult result, const char* call, const std::string& context);

}  // namespace vkattn::vk

// VKATTN_CHECK(vkCreateBuffer(...), "creating the q buffer")
#define VKATTN_CHECK(expr, context) ::vkattn::vk::check((expr), #expr, (context))

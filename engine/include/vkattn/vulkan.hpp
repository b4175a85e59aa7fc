// Embedding vkattn in a Vulkan application: a Context on the caller's own device and queue, the
// caller's buffers as device tensors, and batches recorded into the caller's command buffers, which
// the caller submits. The only public header that includes <vulkan/vulkan.h>.
//
// vkattn calls Vulkan through the system loader (libvulkan), so the handles must come from it too.
// It never destroys what it did not create; everything made from such a Context (tensors, plans,
// caches, batches) must go before the caller destroys the device.
//
// The barrier contract of a batch recorded into the caller's command buffer (ARCHITECTURE.md,
// "Recording into the caller's command buffer"):
//   - vkattn records, before each of its operations, one global memory barrier
//       src: COMPUTE_SHADER | TRANSFER | HOST stages, SHADER_WRITE | TRANSFER_WRITE | HOST_WRITE
//       dst: COMPUTE_SHADER | TRANSFER stages, SHADER_READ | SHADER_WRITE | TRANSFER_READ | TRANSFER_WRITE
//     It orders vkattn's operations among themselves and after everything the caller recorded
//     earlier at the compute and transfer stages, so data the caller wrote with compute shaders or
//     copies needs no barrier of the caller's. Data written at other stages (vertex, fragment,
//     attachments) needs the caller's barrier to COMPUTE_SHADER | TRANSFER first.
//   - vkattn's last writes are compute-shader and transfer writes. Before the caller reads them (or
//     overwrites anything vkattn read) it records a barrier from COMPUTE_SHADER | TRANSFER,
//     SHADER_WRITE | TRANSFER_WRITE to its own stages and accesses (HOST / HOST_READ for reading
//     mapped memory after the fence).
//   - vkattn binds its own compute pipelines and descriptor sets: the caller rebinds its own
//     compute state afterwards. It begins no render pass and must not be recorded inside one.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

#include <vulkan/vulkan.h>

#include "vkattn/batch.hpp"
#include "vkattn/context.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn {

// The caller's Vulkan objects, for Context(const VulkanDevice&, ...).
struct VulkanDevice {
    VkInstance instance = VK_NULL_HANDLE;
    // The apiVersion the instance was created with (VkApplicationInfo::apiVersion): 1.2 or later.
    std::uint32_t api_version = 0;
    VkPhysicalDevice physical_device = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    // The create info the device was made with (read during the Context's construction only):
    // Vulkan cannot be asked afterwards which features were enabled. vkattn reads pEnabledFeatures,
    // the extensions, and the feature structures of the pNext chain (VkPhysicalDeviceFeatures2,
    // Vulkan11/12/13Features, 16BitStorageFeatures, ShaderFloat16Int8Features,
    // SubgroupSizeControlFeaturesEXT, the cooperative-matrix, bf16, maximal-reconvergence and
    // pipeline-executable features; VK_NV_cooperative_matrix2's flexible dimensions, which run the
    // matrix units where the device lists no 16×16×16 shape of its own, as Mesa's lavapipe).
    // Nothing is required beyond Vulkan 1.2 and a compute queue;
    // an optional feature left off costs what DeviceInfo::features_not_enabled says.
    const VkDeviceCreateInfo* create_info = nullptr;
    // The queue vkattn submits to (Batch::submit, the blocking calls): a family with compute, an
    // index the create info made.
    std::uint32_t queue_family = 0;
    std::uint32_t queue_index = 0;
    // vkQueueSubmit needs its queue externally synchronised. When the caller submits to the same
    // queue from other threads, it passes the mutex it holds while doing so, and vkattn locks it
    // around its own submissions. Null: vkattn assumes no other thread submits to the queue while
    // it does.
    std::mutex* queue_mutex = nullptr;
};

// The caller's buffer, for wrap().
struct VulkanBuffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize size = 0;          // VkBufferCreateInfo::size
    VkBufferUsageFlags usage = 0;   // VkBufferCreateInfo::usage: STORAGE_BUFFER is required
};

// A dense tensor of `shape` in `layout` whose element (0, 0, 0, 0) lies `offset` bytes into the
// caller's buffer (a multiple of the element size; the tensor must end within the buffer). Views
// of it are made as of any tensor. vkattn never frees the buffer: the caller keeps it alive while
// the tensor, its views, or work that uses them exist. Wrap a buffer once and reuse the tensor:
// plans cache their descriptor sets by the tensor's memory, and every wrap() is new memory to
// them. Without UNIFORM_TEXEL_BUFFER usage the plans read it with scalar loads (forcing texel loads
// is refused); without TRANSFER_SRC/DST, downloads, uploads and fills of it are refused, and outputs
// are not NaN-poisoned.
DeviceTensor wrap(Context& context, const VulkanBuffer& buffer, std::uint64_t offset, DType dtype,
                  const std::array<std::int64_t, 4>& shape, Layout layout = Layout::bhnd);

// A batch that records into the caller's command buffer instead of one of the context's: every
// operation of a Batch (uploads, plans, cache appends, downloads, fills) may be added, with the
// barriers of the contract above. `commands` must be in the recording state, outside a render pass,
// from a pool of a queue family with compute, and on the context's device. The batch is ended with
// Batch::finish(), not submit(); the caller ends and submits the command buffer, once: the commands
// are one run's (a cache append advances the cache's lengths once; complete() frees what they
// used). The Context must outlive that run. A batch dropped before finish() hands what its commands
// use to the context, which keeps it until it is destroyed.
//
// A caller holding VulkanDevice::queue_mutex must not call vkattn's blocking functions (a blocking
// upload, attention on host memory, Batch::submit): they take that mutex.
Batch record_into(Context& context, VkCommandBuffer commands);

}  // namespace vkattn

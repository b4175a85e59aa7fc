// The caller's VkBuffer as a device tensor (vkattn/vulkan.hpp): a Storage vkattn does not free.
#include <string>

#include "attention/problem.hpp"
#include "runtime.hpp"
#include "tensor/storage.hpp"
#include "tensor/storage_rules.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn {

DeviceTensor wrap(Context& context, const VulkanBuffer& buffer, std::uint64_t offset, DType dtype,
                  const std::array<std::int64_t, 4>& shape, Layout layout) {
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    if (buffer.buffer == VK_NULL_HANDLE) throw InvalidArgument("buffer", "it is VK_NULL_HANDLE.");
    if (!(buffer.usage & VK_BUFFER_USAGE_STORAGE_BUFFER_BIT))
        throw InvalidArgument("buffer", "its usage lacks VK_BUFFER_USAGE_STORAGE_BUFFER_BIT; vkattn's shaders bind "
                                        "tensors as storage buffers.");
    detail::check_shape(shape, "shape");
    const std::uint64_t block = block_bytes(dtype);
    if (offset % block != 0)
        throw InvalidArgument("offset", "it is " + std::to_string(offset) + " bytes, not a multiple of the " +
                                            std::to_string(block) + "-byte " + to_string(dtype) +
                                            (is_block_type(dtype) ? " block." : " element."));
    const auto strides = dense_strides(layout, shape);
    detail::check_block_rows("shape", dtype, shape, strides);
    const std::int64_t elements = detail::checked_mul(
        detail::checked_mul(detail::checked_mul(shape[0], shape[1], "shape"), shape[2], "shape"), shape[3], "shape");
    detail::checked_mul(elements, static_cast<std::int64_t>(block), "shape");
    const std::uint64_t bytes = storage_bytes(dtype, elements);
    if (offset > buffer.size || bytes > buffer.size - offset)
        throw InvalidArgument("shape", "the tensor needs " + std::to_string(bytes) + " bytes from byte " +
                                           std::to_string(offset) + ", past the end of the " +
                                           std::to_string(buffer.size) + "-byte buffer.");
    // Kernels read these types as 32-bit words (common/typed_load.glsl): the word holding the last byte
    // must be inside the buffer.
    if (detail::is_word_type(dtype) && (offset + bytes + 3) / 4 * 4 > buffer.size)
        throw InvalidArgument("shape", "the kernels read " + to_string(dtype) + " as 32-bit words, so the buffer must "
                                           "reach the 4-byte boundary after the tensor's last byte (" +
                                           std::to_string((offset + bytes + 3) / 4 * 4) + "), but it has " +
                                           std::to_string(buffer.size) + " bytes.");
    auto storage = std::make_shared<detail::Storage>(runtime, vk::Buffer::adopt(buffer.buffer, buffer.size), buffer.usage);
    return detail::TensorAccess::make(std::move(storage), offset, dtype, shape, strides);
}

}  // namespace vkattn

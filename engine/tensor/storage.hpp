// The memory behind device tensors: one buffer of a Context's device, shared by every tensor and
// view made from it. Freed with its last tensor, or kept until the device idles when the context
// was lost while a submission may still use it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "vk/buffer.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

class Runtime;

// Usage every tensor buffer of vkattn's has: storage and texel bindings, copies both ways.
constexpr VkBufferUsageFlags kTensorUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                            VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                                            VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

struct Storage {
    Storage(Runtime& owner, vk::Buffer memory, VkBufferUsageFlags usage_flags = kTensorUsage)
        : runtime(&owner), buffer(std::move(memory)), usage(usage_flags) {}
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    Runtime* runtime;
    vk::Buffer buffer;
    // What the buffer may be used for: kTensorUsage for vkattn's own; the caller's (wrap) may lack
    // texel views or copies.
    VkBufferUsageFlags usage;
    bool texel_views() const { return (usage & VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT) != 0; }
};

// InvalidArgument naming `name` unless the tensor's buffer has `needed` usage (the caller's
// buffers, wrap(), may lack copies); `what` says which operation needed it.
void require_usage(const Storage& storage, VkBufferUsageFlags needed, const char* name, const char* what);

// The bytes of a buffer allocated for `bytes` of data: rounded up to 16, plus the 16 bytes of slack
// that bindings rounded up to a vec4 may reach (allocate_storage, Program::scratch).
inline std::uint64_t allocated_bytes(std::uint64_t bytes) { return (bytes + 15) / 16 * 16 + 16; }

// Device-local memory for allocated_bytes(bytes), mapped where the device allows zero-copy. Throws
// ResourceLimit naming `what`.
std::shared_ptr<Storage> allocate_storage(Runtime& runtime, std::uint64_t bytes, const std::string& what);

// InvalidArgument naming `name` unless the tensor starts at a multiple of `alignment` bytes of its
// memory (where the device can bind it).
void require_aligned_offset(const DeviceTensor& tensor, std::uint64_t alignment, const char* name);

// InvalidArgument naming `name` unless every dimension is at least 1.
void check_shape(const std::array<std::int64_t, 4>& shape, const char* name);

// InvalidArgument naming `name`: the tensor has no memory (a default-constructed DeviceTensor).
[[noreturn]] void throw_empty(const char* name);

struct TensorAccess {
    static const std::shared_ptr<Storage>& storage(const DeviceTensor& t) { return t.storage_; }
    static DeviceTensor make(std::shared_ptr<Storage> storage, std::uint64_t offset, DType dtype,
                             const std::array<std::int64_t, 4>& shape, const std::array<std::int64_t, 4>& strides) {
        return DeviceTensor(std::move(storage), offset, dtype, shape, strides);
    }
};

// The tensor's storage, checked to be defined and to belong to `runtime` (InvalidArgument naming
// `name` otherwise).
Storage& storage_of(const DeviceTensor& tensor, const Runtime& runtime, const char* name);

// The bytes from a tensor's first element to one past its last (BasicTensorView::span, in bytes).
inline std::uint64_t span_bytes(DType dtype, const std::array<std::int64_t, 4>& shape,
                                const std::array<std::int64_t, 4>& strides) {
    return storage_bytes(dtype, TensorView{nullptr, dtype, shape, strides}.span());
}
inline std::uint64_t span_bytes(const DeviceTensor& t) { return span_bytes(t.dtype(), t.shape(), t.strides()); }

// The element index of the tensor's element (0, 0, 0, 0) in its memory (its offset is always a
// whole number of blocks: wrap() checks it and views move by whole rows).
inline std::int64_t element_base(const DeviceTensor& t) {
    return static_cast<std::int64_t>(t.offset_bytes() / block_bytes(t.dtype()) * block_elements(t.dtype()));
}

}  // namespace vkattn::detail

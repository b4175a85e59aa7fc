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

struct Storage {
    Storage(Runtime& owner, vk::Buffer memory) : runtime(&owner), buffer(std::move(memory)) {}
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    Runtime* runtime;
    vk::Buffer buffer;
};

// Usage every tensor buffer has: storage and texel bindings, copies both ways.
constexpr VkBufferUsageFlags kTensorUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                            VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                                            VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

// Device-local memory for `bytes` (plus the 16 bytes of slack that bindings rounded up to a vec4
// may reach), mapped where the device allows zero-copy. Throws ResourceLimit naming `what`.
std::shared_ptr<Storage> allocate_storage(Runtime& runtime, std::uint64_t bytes, const std::string& what);

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

// The byte span a tensor's elements touch: [offset_bytes + first, offset_bytes + end).
std::uint64_t span_bytes(const DeviceTensor& tensor);

}  // namespace vkattn::detail

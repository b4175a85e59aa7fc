#include "vkattn/device_tensor.hpp"

#include <string>

#include "attention/problem.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "tensor/storage_rules.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace detail {

Storage::~Storage() {
    if (runtime->lost()) runtime->keep_until_idle(std::make_shared<vk::Buffer>(std::move(buffer)));
}

std::shared_ptr<Storage> allocate_storage(Runtime& runtime, std::uint64_t bytes, const std::string& what) {
    runtime.ensure_usable();
    const std::uint64_t heap = runtime.device_memory_bytes();
    const std::uint64_t padded = allocated_bytes(bytes);
    if (padded > heap)
        throw ResourceLimit(what + " needs " + std::to_string(padded) + " bytes of device memory, above the device's "
                            "largest device-local heap of " + std::to_string(heap) + " bytes.");
    return std::make_shared<Storage>(runtime, vk::Buffer(runtime.device(), padded, kTensorUsage,
                                                         vk::MemoryIntent::device_local, runtime.zero_copy(), what));
}

Storage& storage_of(const DeviceTensor& tensor, const Runtime& runtime, const char* name) {
    const auto& storage = TensorAccess::storage(tensor);
    if (!storage) throw_empty(name);
    if (storage->runtime != &runtime)
        throw InvalidArgument(name, "the tensor belongs to another Context; tensors are bound to the context that "
                                    "made them.");
    return *storage;
}

void require_usage(const Storage& storage, VkBufferUsageFlags needed, const char* name, const char* what) {
    if ((storage.usage & needed) == needed) return;
    const char* flag = needed == VK_BUFFER_USAGE_TRANSFER_SRC_BIT   ? "VK_BUFFER_USAGE_TRANSFER_SRC_BIT"
                       : needed == VK_BUFFER_USAGE_TRANSFER_DST_BIT ? "VK_BUFFER_USAGE_TRANSFER_DST_BIT"
                       : needed == VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT ? "VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT"
                                                                             : "VK_BUFFER_USAGE_STORAGE_BUFFER_BIT";
    throw InvalidArgument(name, std::string(what) + " needs the tensor's buffer to have " + flag +
                                    ", and the caller's buffer was created without it.");
}

void require_aligned_offset(const DeviceTensor& t, std::uint64_t alignment, const char* name) {
    if (t.offset_bytes() % alignment != 0)
        throw InvalidArgument(name, "it starts at byte " + std::to_string(t.offset_bytes()) +
                                        " of its memory; the device binds it at multiples of " + std::to_string(alignment) +
                                        " bytes.");
}

void check_shape(const std::array<std::int64_t, 4>& shape, const char* name) {
    for (int i = 0; i < 4; ++i)
        if (shape[i] <= 0)
            throw InvalidArgument(name, "every dimension must be at least 1, but dimension " + std::to_string(i) +
                                            " is " + std::to_string(shape[i]) + ".");
}

void throw_empty(const char* name) {
    throw InvalidArgument(name, "the tensor is empty (a default-constructed DeviceTensor).");
}

}  // namespace detail


DeviceTensor::DeviceTensor(std::shared_ptr<detail::Storage> storage, std::uint64_t offset, DType dtype,
                           const std::array<std::int64_t, 4>& shape, const std::array<std::int64_t, 4>& strides)
    : storage_(std::move(storage)), offset_(offset), dtype_(dtype), shape_(shape), strides_(strides) {}

DeviceTensor DeviceTensor::empty(Context& context, DType dtype, const std::array<std::int64_t, 4>& shape,
                                 Layout layout) {
    detail::check_shape(shape, "shape");
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    const std::int64_t elements = detail::checked_mul(
        detail::checked_mul(detail::checked_mul(shape[0], shape[1], "shape"), shape[2], "shape"), shape[3], "shape");
    detail::checked_mul(elements, static_cast<std::int64_t>(block_bytes(dtype)), "shape");
    detail::check_block_rows("shape", dtype, shape, dense_strides(layout, shape));
    auto storage = detail::allocate_storage(runtime, storage_bytes(dtype, elements), "a " + to_string(dtype) +
                                                                                         " device tensor");
    return DeviceTensor(std::move(storage), 0, dtype, shape, dense_strides(layout, shape));
}

DeviceTensor DeviceTensor::from_host(Context& context, const TensorView& host, Layout layout) {
    DeviceTensor t = empty(context, host.dtype, host.shape, layout);
    t.upload(host);
    return t;
}

bool DeviceTensor::contiguous() const {
    // Dimensions of extent 1 never step, so their strides do not matter.
    const auto dense = dense_strides(Layout::bhnd, shape_);
    for (int i = 0; i < 4; ++i)
        if (shape_[i] > 1 && strides_[i] != dense[i]) return false;
    return true;
}

DeviceTensor DeviceTensor::slice(int dim, std::int64_t first, std::int64_t count, const char* name) const {
    if (!storage_) detail::throw_empty(name);
    if (first < 0 || count < 1 || first > shape_[dim] - count)
        throw InvalidArgument(name, "the range [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                        ") is not a non-empty part of [0, " + std::to_string(shape_[dim]) + ").");
    DeviceTensor view = *this;
    view.offset_ += storage_bytes(dtype_, first * strides_[dim]);
    view.shape_[dim] = count;
    return view;
}

DeviceTensor DeviceTensor::batch(std::int64_t first, std::int64_t count) const { return slice(0, first, count, "batch"); }
DeviceTensor DeviceTensor::heads(std::int64_t first, std::int64_t count) const { return slice(1, first, count, "heads"); }
DeviceTensor DeviceTensor::seq(std::int64_t first, std::int64_t count) const { return slice(2, first, count, "seq"); }

void DeviceTensor::upload(const TensorView& host) const {
    if (!storage_) detail::throw_empty("tensor");
    Batch batch = detail::BatchAccess::make(*storage_->runtime);
    batch.upload(*this, host);
    batch.submit().wait();
}

void DeviceTensor::download(const MutableTensorView& host) const {
    if (!storage_) detail::throw_empty("tensor");
    Batch batch = detail::BatchAccess::make(*storage_->runtime);
    batch.download(*this, host);
    batch.submit().wait();
}

}  // namespace vkattn

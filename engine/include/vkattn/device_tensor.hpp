// Device tensors: rank-4 tensors in a Context's device memory, and views of them. A DeviceTensor is
// a handle ({memory, byte offset, dtype, shape, element strides}); copies and views share the
// memory, which lives as long as any handle to it. Every operation of vkattn that takes device data
// takes DeviceTensors, so the data stays on the device between calls. Like every Vulkan object, a
// tensor must not outlive its Context.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "vkattn/tensor.hpp"

namespace vkattn {

class Context;

namespace detail {
struct Storage;
struct TensorAccess;  // the engine's way to a tensor's storage (not API)
}  // namespace detail

class DeviceTensor {
public:
    DeviceTensor() = default;  // no memory: defined() is false

    // Uninitialised device memory for a dense tensor of `shape` in `layout` (device-local memory;
    // mapped where the device allows, which the engine uses only for its own temporaries).
    static DeviceTensor empty(Context& context, DType dtype, const std::array<std::int64_t, 4>& shape,
                              Layout layout = Layout::bhnd);
    // A dense device copy of host data, in `layout` (the host view's strides may differ); blocking.
    static DeviceTensor from_host(Context& context, const TensorView& host, Layout layout = Layout::bhnd);

    bool defined() const { return storage_ != nullptr; }
    DType dtype() const { return dtype_; }
    const std::array<std::int64_t, 4>& shape() const { return shape_; }
    const std::array<std::int64_t, 4>& strides() const { return strides_; }  // elements; strides[3] = 1
    // Where element (0, 0, 0, 0) lies in the memory, in bytes.
    std::uint64_t offset_bytes() const { return offset_; }
    std::int64_t elements() const { return shape_[0] * shape_[1] * shape_[2] * shape_[3]; }
    // Whether the elements fill their span without gaps, in [B, H, N, D] order (bhnd-dense).
    bool contiguous() const;

    // Views of the same memory: `count` batches, heads or sequence positions from `first`. Throw
    // InvalidArgument naming the dimension when the range is outside the tensor.
    DeviceTensor batch(std::int64_t first, std::int64_t count) const;
    DeviceTensor heads(std::int64_t first, std::int64_t count) const;
    DeviceTensor seq(std::int64_t first, std::int64_t count) const;

    // Blocking copies between this tensor's elements and a host view of the same shape and dtype
    // (any strides on either side; gaps are never touched). They run after the work submitted to
    // the context before them and return once the data has arrived.
    void upload(const TensorView& host) const;
    void download(const MutableTensorView& host) const;

private:
    friend struct detail::TensorAccess;
    DeviceTensor(std::shared_ptr<detail::Storage> storage, std::uint64_t offset, DType dtype,
                 const std::array<std::int64_t, 4>& shape, const std::array<std::int64_t, 4>& strides);
    DeviceTensor slice(int dim, std::int64_t first, std::int64_t count, const char* name) const;

    std::shared_ptr<detail::Storage> storage_;
    std::uint64_t offset_ = 0;
    DType dtype_ = DType::f32;
    std::array<std::int64_t, 4> shape_{};
    std::array<std::int64_t, 4> strides_{};
};

}  // namespace vkattn

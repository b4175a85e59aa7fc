// Between a rank's device tensors and the host: the ring checks its arguments, cuts the masks'
// parts and packs K/V for MPI from host memory (Vulkan has no GPU-direct transport), and its blocks
// run on device tensors.
#pragma once

#include <cstdint>
#include <exception>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::distributed::detail {

// A dense host buffer of `shape` in `dtype` (resized to fit) and a view of it.
MutableTensorView host_buffer(std::vector<std::uint8_t>& bytes, DType dtype, const std::array<std::int64_t, 4>& shape);

// A mutable view read-only.
inline TensorView read_only(const MutableTensorView& t) {
    TensorView v;
    v.data = t.data;
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.strides = t.strides;
    return v;
}

// A mask's part, or any host array, as a device tensor of `shape` left-padded with 1s to rank 4.
DeviceTensor device_array(Context& context, const void* data, DType dtype, const std::vector<std::int64_t>& shape);

// A device tensor's elements in host memory, dense.
struct HostCopy {
    std::vector<std::uint8_t> bytes;
    TensorView view;  // empty (no data) for an undefined tensor
    HostCopy() = default;
    explicit HostCopy(const DeviceTensor& t);
};

// A device shard's inputs in host memory: k and v, the key lengths and the masks copied (the
// per-head constants are host spans already), q's shape and type only (a stand-in view). `error` holds what went wrong (a paged or packed
// shard, a missing tensor) for the ring to throw inside its agreement, so that every rank hears it.
struct HostShard {
    explicit HostShard(const DeviceAttentionInputs& in);
    HostShard(const HostShard&) = delete;  // `inputs` points into the members
    HostShard& operator=(const HostShard&) = delete;

    AttentionInputs inputs;
    std::exception_ptr error;

private:
    std::vector<std::uint8_t> q_row_;
    HostCopy k_, v_, lengths_, bool_mask_, float_mask_;
    std::vector<std::int64_t> bool_shape_, float_shape_;
};

}  // namespace vkattn::distributed::detail

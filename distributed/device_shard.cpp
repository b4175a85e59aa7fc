#include "device_shard.hpp"

#include <algorithm>

#include "vkattn/errors.hpp"

namespace vkattn::distributed::detail {

MutableTensorView host_buffer(std::vector<std::uint8_t>& bytes, DType dtype, const std::array<std::int64_t, 4>& shape) {
    bytes.resize(static_cast<std::size_t>(storage_bytes(dtype, shape[0] * shape[1] * shape[2] * shape[3])));
    return make_view(static_cast<void*>(bytes.data()), dtype, Layout::bhnd, shape);
}

DeviceTensor device_array(Context& context, const void* data, DType dtype, const std::vector<std::int64_t>& shape) {
    std::array<std::int64_t, 4> s{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), s.begin() + static_cast<std::ptrdiff_t>(4 - shape.size()));
    return DeviceTensor::from_host(context, make_view(data, dtype, Layout::bhnd, s));
}

HostCopy::HostCopy(const DeviceTensor& t) {
    if (!t.defined()) return;
    const MutableTensorView to = host_buffer(bytes, t.dtype(), t.shape());
    t.download(to);
    view = read_only(to);
}

HostShard::HostShard(const DeviceAttentionInputs& in) {
    try {
        if (in.paged.defined()) throw InvalidArgument("paged", "ring attention takes dense k and v, not a paged cache.");
        if (in.varlen.defined()) throw InvalidArgument("varlen", "ring attention does not take packed sequences.");
        for (const auto& [t, name] : {std::pair{&in.q, "q"}, std::pair{&in.k, "k"}, std::pair{&in.v, "v"}})
            if (!t->defined()) throw InvalidArgument(name, "the tensor is empty.");
        // q is read on the device only: the host checks see its shape and type through one row of
        // zeros repeated (strides 0), so it never leaves the device.
        q_row_.assign(static_cast<std::size_t>(storage_bytes(in.q.dtype(), in.q.shape()[3])), 0);
        TensorView q = make_view(static_cast<const void*>(q_row_.data()), in.q.dtype(), Layout::bhnd, in.q.shape());
        q.strides = {0, 0, 0, 1};
        k_ = HostCopy(in.k);
        v_ = HostCopy(in.v);
        inputs = {.q = q, .k = k_.view, .v = v_.view, .alibi_slopes = in.alibi_slopes, .sinks = in.sinks,
                  .k_scale = in.k_scale, .v_scale = in.v_scale};
        if (in.kv_lengths.defined()) {
            if (in.kv_lengths.dtype() != DType::i32 || in.kv_lengths.elements() != in.q.shape()[0])
                throw InvalidArgument("kv_lengths", "must be i32 with B = " + std::to_string(in.q.shape()[0]) + " elements.");
            lengths_ = HostCopy(in.kv_lengths);
            inputs.kv_lengths = {static_cast<const std::int32_t*>(lengths_.view.data), static_cast<std::size_t>(in.q.shape()[0])};
        }
        for (const auto& [mask, copy, shape, dtype, name] :
             {std::tuple{&in.bool_mask, &bool_mask_, &bool_shape_, DType::u8, "bool_mask"},
              std::tuple{&in.float_mask, &float_mask_, &float_shape_, DType::f32, "float_mask"}}) {
            if (!mask->defined()) continue;
            if (mask->dtype() != dtype || !mask->contiguous())
                throw InvalidArgument(name, "must be " + to_string(dtype) + " and contiguous.");
            *copy = HostCopy(*mask);
            shape->assign(mask->shape().begin(), mask->shape().end());
            (dtype == DType::u8 ? inputs.bool_mask : inputs.float_mask) = MaskView{copy->view.data, *shape};
        }
    } catch (...) {
        error = std::current_exception();
        inputs = {};
    }
}

}  // namespace vkattn::distributed::detail

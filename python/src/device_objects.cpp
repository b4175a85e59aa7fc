#include "device_objects.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace nb = nanobind;

namespace vkattn::python {
namespace {

std::array<std::int64_t, 4> shape4(const std::vector<std::int64_t>& shape, const char* argument) {
    if (shape.size() != 4) throw InvalidArgument(argument, "internal: device tensors are rank 4 here.");
    return {shape[0], shape[1], shape[2], shape[3]};
}

DType host_dtype(const Input& a, const char* argument) {
    const nb::dlpack::dtype t = a.dtype();
    if (t == nb::dtype<float>()) return DType::f32;
    if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && t.bits == 16) return DType::f16;
    throw InvalidArgument(argument, "its dtype must be float32 or float16.");
}

}  // namespace

DType dtype_named(const std::string& name, const char* argument) {
    if (name == "float32") return DType::f32;
    if (name == "float16") return DType::f16;
    if (name == "bfloat16") return DType::bf16;
    return dtype_from_string(name, argument);
}

Tensor tensor_from_numpy(Context& context, const Input& a, const std::optional<std::string>& dtype) {
    if (a.ndim() != 4) throw InvalidArgument("array", "internal: device tensors are rank 4 here.");
    TensorView host{a.data(), host_dtype(a, "array"), {}, {}};
    for (std::size_t i = 0; i < 4; ++i) {
        host.shape[i] = static_cast<std::int64_t>(a.shape(i));
        host.strides[i] = a.stride(i);
    }
    if (dtype && dtype_named(*dtype, "dtype") != host.dtype)
        throw InvalidArgument("dtype", "a tensor from host data keeps the data's dtype (" + to_string(host.dtype) +
                                       "); convert the array first.");
    nb::gil_scoped_release unlocked;
    return {DeviceTensor::from_host(context, host), &context};
}

Tensor tensor_empty(Context& context, const std::vector<std::int64_t>& shape, const std::string& dtype) {
    return {DeviceTensor::empty(context, dtype_named(dtype, "dtype"), shape4(shape, "shape")), &context};
}

void tensor_to_numpy(const Tensor& t, const Output& out) {
    const nb::dlpack::dtype d = out.dtype();
    const bool float_array = d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && d.lanes == 1;
    const bool same_type = float_array && ((t.tensor.dtype() == DType::f32 && d.bits == 32) ||
                                           (t.tensor.dtype() == DType::f16 && d.bits == 16));
    if (!same_type || out.size() != static_cast<std::size_t>(t.tensor.elements()) || !c_contiguous(out))
        throw InvalidArgument("out", "must be a C-contiguous array of the tensor's dtype and size.");
    MutableTensorView host{out.data(), t.tensor.dtype(), t.tensor.shape(), dense_strides(Layout::bhnd, t.tensor.shape())};
    nb::gil_scoped_release unlocked;
    t.tensor.download(host);
}

Cache::Cache(Context& context, std::int64_t batch, std::int64_t kv_heads, std::int64_t dim, std::int64_t dim_v,
             std::int64_t capacity, const std::string& dtype, bool paged, std::int64_t block_size)
    : context_(&context),
      cache_([&]() -> std::variant<KvCache, PagedKvCache> {
          const DType storage = dtype_named(dtype, "dtype");
          if (!paged)
              return KvCache(context, {.batch = batch, .kv_heads = kv_heads, .capacity = capacity, .dim = dim,
                                       .dim_v = dim_v, .dtype = storage});
          if (block_size < 1) throw InvalidArgument("block_size", "must be at least 1.");
          if (capacity < 1) throw InvalidArgument("capacity", "must be at least 1.");
          const std::int64_t per_sequence = (capacity + block_size - 1) / block_size;
          return PagedKvCache(context, {.batch = batch, .kv_heads = kv_heads, .num_blocks = batch * per_sequence,
                                        .block_size = block_size, .max_blocks_per_seq = per_sequence, .dim = dim,
                                        .dim_v = dim_v, .dtype = storage});
      }()) {}

void Cache::append(const Tensor& k, const Tensor& v, const std::vector<std::int32_t>& counts) {
    nb::gil_scoped_release unlocked;
    Batch batch(*context_);
    std::visit([&](auto& cache) { cache.append(batch, k.tensor, v.tensor, counts); }, cache_);
    batch.submit().wait();
}

nb::object Cache::attention(const Tensor& q, const Tensor& o, const std::optional<Tensor>& lse, const AttentionCall& call) {
    const AttentionOptions options = options_of(call);
    const DeviceAttentionInputs in = std::visit([&](const auto& cache) { return cache.inputs(q.tensor); }, cache_);
    const DeviceAttentionOutputs out{.o = o.tensor, .lse = lse ? lse->tensor : DeviceTensor{}};
    AttentionReport report;
    {
        nb::gil_scoped_release unlocked;
        report = vkattn::attention(*context_, in, out, options);
    }
    return report_dict(report);
}

void Cache::reset(const std::vector<std::int32_t>& lengths) {
    nb::gil_scoped_release unlocked;
    Batch batch(*context_);
    std::visit([&](auto& cache) { cache.reset(batch, lengths); }, cache_);
    batch.submit().wait();
}

std::vector<std::int32_t> Cache::lengths() const {
    return std::visit([](const auto& cache) { return cache.recorded_lengths(); }, cache_);
}

std::int64_t Cache::capacity() const {
    if (const auto* paged = std::get_if<PagedKvCache>(&cache_)) return paged->capacity();
    return std::get<KvCache>(cache_).options().capacity;
}

}  // namespace vkattn::python

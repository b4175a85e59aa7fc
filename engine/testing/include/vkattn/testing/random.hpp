// Random test tensors: fresh values per case from a seed the failing case prints; never zeros.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "vkattn/tensor.hpp"

namespace vkattn::testing {

// A host tensor that owns its storage (fp32 values, or fp16 bits) and views it in a layout.
struct HostTensor {
    DType dtype = DType::f32;
    Layout layout = Layout::bhnd;
    std::array<std::int64_t, 4> shape{};
    std::vector<float> f32;
    std::vector<std::uint16_t> f16;

    std::int64_t count() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
    TensorView view() const {
        return make_view<const void*>(dtype == DType::f32 ? static_cast<const void*>(f32.data())
                                                          : static_cast<const void*>(f16.data()),
                                      dtype, layout, shape);
    }
    MutableTensorView mutable_view() {
        return make_view<void*>(dtype == DType::f32 ? static_cast<void*>(f32.data()) : static_cast<void*>(f16.data()),
                                dtype, layout, shape);
    }
    // Logical element (b, h, n, d) as float.
    float at(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) const {
        const auto off = static_cast<std::size_t>(view().offset(b, h, n, d));
        return dtype == DType::f32 ? f32[off] : half_to_float(f16[off]);
    }
};

inline HostTensor random_tensor(std::mt19937& rng, DType dtype, Layout layout, std::array<std::int64_t, 4> shape,
                                float amplitude = 1.0f) {
    HostTensor t;
    t.dtype = dtype;
    t.layout = layout;
    t.shape = shape;
    std::uniform_real_distribution<float> dist(-amplitude, amplitude);
    const auto n = static_cast<std::size_t>(t.count());
    if (dtype == DType::f32) {
        t.f32.resize(n);
        for (auto& x : t.f32) x = dist(rng);
    } else {
        t.f16.resize(n);
        for (auto& x : t.f16) x = float_to_half(dist(rng));
    }
    return t;
}

// n uniform values in [-amplitude, amplitude] (weights, activations).
inline std::vector<float> random_values(std::mt19937& rng, std::int64_t n, float amplitude) {
    std::uniform_real_distribution<float> d(-amplitude, amplitude);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(rng);
    return v;
}

// A tensor of one value: `f32` in f32 storage, the bits `f16` in f16 storage.
inline HostTensor filled_tensor(DType dtype, Layout layout, std::array<std::int64_t, 4> shape, float f32,
                                std::uint16_t f16) {
    HostTensor t;
    t.dtype = dtype;
    t.layout = layout;
    t.shape = shape;
    const auto n = static_cast<std::size_t>(t.count());
    if (dtype == DType::f32) t.f32.assign(n, f32);
    else t.f16.assign(n, f16);
    return t;
}

// An output tensor filled with NaN, so an element nobody writes cannot pass.
inline HostTensor nan_tensor(DType dtype, Layout layout, std::array<std::int64_t, 4> shape) {
    return filled_tensor(dtype, layout, shape, std::numeric_limits<float>::quiet_NaN(), 0x7e00);
}

// A tensor of zeros (a KV cache's rows before any append).
inline HostTensor zero_tensor(DType dtype, Layout layout, std::array<std::int64_t, 4> shape) {
    return filled_tensor(dtype, layout, shape, 0.0f, 0);
}

}  // namespace vkattn::testing

// Random test tensors: fresh values per case from a seed the failing case prints; never zeros.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "vkattn/quantize.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::testing {

// A host tensor that owns its storage (fp32 values, fp16 bits, or the bytes of any other type:
// bf16 bits, ggml's blocks) and views it in a layout.
struct HostTensor {
    DType dtype = DType::f32;
    Layout layout = Layout::bhnd;
    std::array<std::int64_t, 4> shape{};
    std::vector<float> f32;
    std::vector<std::uint16_t> f16;
    std::vector<std::uint8_t> bytes;  // every other dtype

    std::int64_t count() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
    const void* data() const {
        if (dtype == DType::f32) return f32.data();
        if (dtype == DType::f16) return f16.data();
        return bytes.data();
    }
    TensorView view() const { return make_view<const void*>(data(), dtype, layout, shape); }
    MutableTensorView mutable_view() { return make_view<void*>(const_cast<void*>(data()), dtype, layout, shape); }
    // Logical element (b, h, n, d) as float (a block type's dequantized value; an fp8 element
    // unscaled).
    float at(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) const {
        return load_element(data(), dtype, view().offset(b, h, n, d));
    }
    // Every logical element as double, in [B, H, N, D] order (for testing::compare).
    std::vector<double> doubles() const {
        std::vector<double> out;
        out.reserve(static_cast<std::size_t>(count()));
        for (std::int64_t b = 0; b < shape[0]; ++b)
            for (std::int64_t h = 0; h < shape[1]; ++h)
                for (std::int64_t n = 0; n < shape[2]; ++n)
                    for (std::int64_t d = 0; d < shape[3]; ++d) out.push_back(at(b, h, n, d));
        return out;
    }
};

// Uniform values in [-amplitude, amplitude] stored in `dtype`: rounded to f16/bf16, or quantized row
// by row as ggml does (vkattn/quantize.hpp) for the block types, or as fp8(x / scale) with head h's
// scale (`scales` [H], or 1 when empty) for the fp8 types.
inline HostTensor random_tensor(std::mt19937& rng, DType dtype, Layout layout, std::array<std::int64_t, 4> shape,
                                float amplitude = 1.0f, std::span<const float> scales = {}) {
    HostTensor t;
    t.dtype = dtype;
    t.layout = layout;
    t.shape = shape;
    std::uniform_real_distribution<float> dist(-amplitude, amplitude);
    const auto n = static_cast<std::size_t>(t.count());
    if (dtype == DType::f32) {
        t.f32.resize(n);
        for (auto& x : t.f32) x = dist(rng);
    } else if (dtype == DType::f16) {
        t.f16.resize(n);
        for (auto& x : t.f16) x = float_to_half(dist(rng));
    } else {
        t.bytes.resize(storage_bytes(dtype, static_cast<std::int64_t>(n)));
        const auto D = static_cast<std::size_t>(shape[3]);
        std::vector<float> row(D);
        const TensorView v = t.view();
        for (std::int64_t b = 0; b < shape[0]; ++b)
            for (std::int64_t h = 0; h < shape[1]; ++h)
                for (std::int64_t r = 0; r < shape[2]; ++r) {
                    for (auto& x : row) x = dist(rng);
                    const std::uint64_t at = storage_bytes(dtype, v.offset(b, h, r, 0));
                    const float scale = is_fp8(dtype) && !scales.empty() ? scales[static_cast<std::size_t>(h)] : 1.0f;
                    quantize_row(dtype, row, {t.bytes.data() + at, row_bytes(dtype, shape[3])}, scale);
                }
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

// A tensor of one value: `f32` in f32 storage, the bits `bits16` in f16 or bf16 storage.
inline HostTensor filled_tensor(DType dtype, Layout layout, std::array<std::int64_t, 4> shape, float f32,
                                std::uint16_t bits16) {
    HostTensor t;
    t.dtype = dtype;
    t.layout = layout;
    t.shape = shape;
    const auto n = static_cast<std::size_t>(t.count());
    if (dtype == DType::f32) {
        t.f32.assign(n, f32);
    } else if (dtype == DType::f16) {
        t.f16.assign(n, bits16);
    } else if (is_block_type(dtype) || is_fp8(dtype)) {  // zeros only: zero bytes stand for zeros
        t.bytes.assign(storage_bytes(dtype, static_cast<std::int64_t>(n)), 0);
    } else {
        t.bytes.resize(2 * n);
        for (std::size_t i = 0; i < n; ++i) {
            t.bytes[2 * i] = static_cast<std::uint8_t>(bits16 & 0xff);
            t.bytes[2 * i + 1] = static_cast<std::uint8_t>(bits16 >> 8);
        }
    }
    return t;
}

// An output tensor (f32, f16 or bf16) filled with NaN, so an element nobody writes cannot pass.
inline HostTensor nan_tensor(DType dtype, Layout layout, std::array<std::int64_t, 4> shape) {
    return filled_tensor(dtype, layout, shape, std::numeric_limits<float>::quiet_NaN(),
                         dtype == DType::bf16 ? 0x7fc0 : 0x7e00);
}

// A tensor of zeros (a KV cache's rows before any append).
inline HostTensor zero_tensor(DType dtype, Layout layout, std::array<std::int64_t, 4> shape) {
    return filled_tensor(dtype, layout, shape, 0.0f, 0);
}

}  // namespace vkattn::testing

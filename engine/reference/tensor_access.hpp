// Element access for the CPU reference: any storage type read as double, f32/f16/bf16 written from
// double (one rounding, as a store on the device).
#pragma once

#include <cstdint>

#include "vkattn/quantize.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::detail {

inline double load(const TensorView& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d) {
    return load_element(t.data, t.dtype, t.offset(b, h, n, d));
}

inline void store(const MutableTensorView& t, std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d,
                  double value) {
    const std::int64_t at = t.offset(b, h, n, d);
    const auto f = static_cast<float>(value);
    if (t.dtype == DType::f16)
        static_cast<std::uint16_t*>(t.data)[at] = float_to_half(f);
    else if (t.dtype == DType::bf16)
        static_cast<std::uint16_t*>(t.data)[at] = float_to_bf16(f);
    else
        static_cast<float*>(t.data)[at] = f;
}

}  // namespace vkattn::detail

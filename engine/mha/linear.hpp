// One projection Y[rows, out] = X[rows, in]·Wᵀ + b on the device (bmm.comp with a bias), over dense
// device tensors: the multi-head layer's input and output projections, in its forward pass and its
// decode steps alike.
#pragma once

#include <cstdint>

#include "plan/program.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

class Runtime;

struct Linear {
    const DeviceTensor* x;  // [rows, in] elements, dense
    const DeviceTensor* w;  // [out, in], as nn.Linear stores it
    const DeviceTensor* b;  // [out] f32; null: no bias
    const DeviceTensor* y;  // [rows, out], dense
    std::int64_t rows, in, out;
};

// Appends the projection's dispatch to `program`. Throws ResourceLimit when an operand passes one
// binding or the rows pass the device's grid.
void record_linear(Program& program, Runtime& runtime, const Linear& linear, DType dtype);

}  // namespace vkattn::detail

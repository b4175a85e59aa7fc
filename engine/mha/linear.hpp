// Two-dimensional products over dense device matrices (bmm.comp, one unit): the multi-head layer's
// projections Y = X·Wᵀ + b in its forward pass and decode steps, and its backward's products
// dX = dY·W and dW = dYᵀ·X.
#pragma once

#include <cstdint>

#include "attention/tuning.hpp"
#include "plan/program.hpp"
#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

class Runtime;

// C[m, n] = alpha·op(A)·op(B) (+ bias[n] or + R[m, n]). Stored: A [m][k] ([k][m] when `form` is
// at_b), B [n][k] when a_bt, else [k][n]; C [m][n]; each dense from its first element.
struct Product {
    BmmForm form = BmmForm::a_bt;
    const DeviceTensor* a = nullptr;
    const DeviceTensor* b = nullptr;
    const DeviceTensor* c = nullptr;
    std::int64_t m = 0, n = 0, k = 0;
    float alpha = 1.0f;
    const DeviceTensor* bias = nullptr;      // f32 [n]
    const DeviceTensor* residual = nullptr;  // f32 [m, n]; may be C itself when C is f32
};

// Appends the product's dispatch to `program`. Throws ResourceLimit when an operand passes one
// binding or the rows pass the device's grid.
void record_product(Program& program, Runtime& runtime, const Product& product);

struct Linear {
    const DeviceTensor* x;  // [rows, in] elements, dense
    const DeviceTensor* w;  // [out, in], as nn.Linear stores it
    const DeviceTensor* b;  // [out] f32; null: no bias
    const DeviceTensor* y;  // [rows, out], dense
    std::int64_t rows, in, out;
};

// Y = X·Wᵀ + b: record_product's a_bt form.
void record_linear(Program& program, Runtime& runtime, const Linear& linear);

}  // namespace vkattn::detail

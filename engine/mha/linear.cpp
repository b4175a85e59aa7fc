#include "mha/linear.hpp"

#include <algorithm>
#include <string>

#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "runtime.hpp"
#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"
#include "types/narrow.hpp"

namespace vkattn::detail {
namespace {

// A tensor bound from its first element: its bytes rounded up to a vec4, within its buffer.
Binding bound(std::uint32_t binding, const DeviceTensor& t, TexelView view = TexelView::rgba32f) {
    const vk::Buffer& buffer = TensorAccess::storage(t)->buffer;
    const std::uint64_t range = std::min((span_bytes(t) + 15) / 16 * 16, buffer.size() - t.offset_bytes());
    return {binding, &buffer, t.offset_bytes(), range, view};
}

}  // namespace

void record_product(Program& program, Runtime& runtime, const Product& p) {
    const vk::DeviceCaps& caps = runtime.device().caps();
    const DType ta = p.a->dtype(), tb = p.b->dtype(), tc = p.c->dtype();
    const std::uint64_t largest = std::max({u64(p.m * p.k) * size_of(ta), u64(p.k * p.n) * size_of(tb),
                                            u64(p.m * p.n) * size_of(tc)});
    if (largest > runtime.max_binding_bytes())
        throw ResourceLimit("a product operand needs " + std::to_string(largest) + " bytes in one binding; the device "
                            "allows " + std::to_string(runtime.max_binding_bytes()) + " (reduce the batch or sequence).");
    // Rows read through texel views: A's stored rows (k long, or m when transposed) and B's (k, or n).
    const std::int64_t a_row = p.form == BmmForm::at_b ? p.m : p.k, b_row = p.form == BmmForm::a_bt ? p.k : p.n;
    const BmmConfig config = choose_product(caps, {ta, tb}, a_row % 4 == 0 && b_row % 4 == 0, largest, p.form, {});
    const std::int64_t row_blocks = (p.m + config.block_rows() - 1) / config.block_rows();
    if (row_blocks > caps.max_workgroup_count[1])
        throw ResourceLimit("a product over " + std::to_string(p.m) + " rows needs " + std::to_string(row_blocks) +
                            " workgroups along y; the device allows " + std::to_string(caps.max_workgroup_count[1]) + ".");
    const BmmAdd add = p.bias ? BmmAdd::bias : p.residual ? BmmAdd::residual : BmmAdd::none;
    const vk::Kernel& kernel = bmm_kernel(runtime, config, p.form, ta, tb, tc, add);
    BmmParams params{.chunk = {.first_unit = 0, .first_row = 0, .rows = u32(p.m)},
                     .M = u32(p.m),
                     .N = u32(p.n),
                     .K = u32(p.k),
                     .alpha = p.alpha,
                     .heads = 1,
                     .group = 1};
    params.a.stride = {0, 0, u32(a_row), 1};
    params.b.stride = {0, 0, u32(b_row), 1};
    params.c.stride = {0, 0, u32(p.n), 1};
    params.residual.stride = {0, 0, u32(p.n), 1};
    Dispatch d{.kernel = &kernel, .params = params};
    // Without an addend the shader never reads binding 4, nor binding 5 (an fp8 B's scales): B
    // stands in for them.
    const DeviceTensor& addend = p.bias ? *p.bias : p.residual ? *p.residual : *p.b;
    d.bindings = {bound(1, *p.a, float_view(ta)), bound(2, *p.b, float_view(tb)), bound(3, *p.c), bound(4, addend),
                  bound(5, *p.b)};
    d.groups = {u32((p.n + config.block_cols() - 1) / config.block_cols()), u32(row_blocks), 1};
    program.dispatch(d);
}

void record_linear(Program& program, Runtime& runtime, const Linear& l) {
    record_product(program, runtime,
                   {.form = BmmForm::a_bt, .a = l.x, .b = l.w, .c = l.y, .m = l.rows, .n = l.out, .k = l.in, .bias = l.b});
}

}  // namespace vkattn::detail

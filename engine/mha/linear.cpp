#include "mha/linear.hpp"

#include <algorithm>
#include <string>

#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "attention/tuning.hpp"
#include "runtime.hpp"
#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
std::uint64_t u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// A tensor bound from its first element: its bytes rounded up to a vec4, within its buffer.
Binding bound(std::uint32_t binding, const DeviceTensor& t, TexelView view = TexelView::rgba32f) {
    const vk::Buffer& buffer = TensorAccess::storage(t)->buffer;
    const std::uint64_t range = std::min((span_bytes(t) + 15) / 16 * 16, buffer.size() - t.offset_bytes());
    return {binding, &buffer, t.offset_bytes(), range, view};
}

}  // namespace

void record_linear(Program& program, Runtime& runtime, const Linear& l, DType dtype) {
    const vk::DeviceCaps& caps = runtime.device().caps();
    const std::uint64_t eb = size_of(dtype);
    const std::uint64_t largest = std::max({u64(l.rows * l.in), u64(l.out * l.in), u64(l.rows * l.out)}) * eb;
    const BmmConfig config = choose_linear(caps, dtype, l.in, largest, {});
    if (largest > runtime.max_binding_bytes())
        throw ResourceLimit("a projection operand needs " + std::to_string(largest) + " bytes in one binding; the device "
                            "allows " + std::to_string(runtime.max_binding_bytes()) + " (reduce the batch or sequence).");
    const std::int64_t row_blocks = (l.rows + config.block_rows() - 1) / config.block_rows();
    if (row_blocks > caps.max_workgroup_count[1])
        throw ResourceLimit("a projection over " + std::to_string(l.rows) + " rows needs " + std::to_string(row_blocks) +
                            " workgroups along y; the device allows " + std::to_string(caps.max_workgroup_count[1]) + ".");
    const vk::Kernel& kernel = bmm_kernel(runtime, config, true, dtype, dtype, dtype, l.b ? BmmAdd::bias : BmmAdd::none);
    BmmParams params{.chunk = {.first_unit = 0, .first_row = 0, .rows = u32(l.rows)},
                     .M = u32(l.rows),
                     .N = u32(l.out),
                     .K = u32(l.in),
                     .alpha = 1.0f,
                     .heads = 1,
                     .group = 1};
    params.a.stride = {0, 0, u32(l.in), 1};
    params.b.stride = {0, 0, u32(l.in), 1};  // W is [out][in]: B transposed
    params.c.stride = {0, 0, u32(l.out), 1};
    Dispatch d{.kernel = &kernel, .params = params};
    // Without a bias the shader never reads binding 4; the weight stands in for it.
    // Nor binding 5 (an fp8 B's scales): the weight again.
    d.bindings = {bound(1, *l.x, float_view(dtype)), bound(2, *l.w, float_view(dtype)), bound(3, *l.y), bound(4, l.b ? *l.b : *l.w),
                  bound(5, *l.w)};
    d.groups = {u32((l.out + config.block_cols() - 1) / config.block_cols()), u32(row_blocks), 1};
    program.dispatch(d);
}

}  // namespace vkattn::detail

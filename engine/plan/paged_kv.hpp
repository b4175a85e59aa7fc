// A paged K/V (vkattn::DevicePagedKv) as plans see it: its geometry read and checked from the
// tensors, the one rule for what a paged call may pass.
#pragma once

#include "attention/problem.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::detail {

// The geometry of the pools and the block table. Throws InvalidArgument naming the tensor
// ("paged.k_pools[1]", ...) for a missing tensor, a dtype or a shape that does not fit the rest.
PagedSpec paged_spec(const DevicePagedKv& paged);

// The virtual K (dim = Dk) or V (dim = Dv) tensor a paged K/V stands for:
// [B, Hkv, table_stride · block_size, dim], strided as one block's rows are.
TensorLayout paged_layout(const PagedSpec& spec, DType dtype, std::int64_t batch, std::int64_t kv_heads,
                          std::int64_t dim);

// "block_size 16, 40 blocks in 1 pool, 12 entries per sequence": for error messages.
std::string paged_text(const PagedSpec& spec);

}  // namespace vkattn::detail

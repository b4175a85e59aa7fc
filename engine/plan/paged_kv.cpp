#include "plan/paged_kv.hpp"

#include <string>

#include "attention/kernels.hpp"
#include "submit/host_copy.hpp"
#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

std::string indexed(const char* name, std::size_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

}  // namespace

PagedSpec paged_spec(const DevicePagedKv& paged) {
    const DeviceTensor& table = paged.block_table;
    if (!table.defined()) throw_empty("paged.block_table");
    const auto& ts = table.shape();
    if (table.dtype() != DType::i32 || ts[1] != 1 || ts[2] != 1 || !table.contiguous())
        throw InvalidArgument("paged.block_table", "it must be a contiguous i32 tensor [B, 1, 1, max_blocks], not " +
                                                       to_string(table.dtype()) + " " + shape_text(ts) + ".");
    const std::size_t pools = paged.k_pools.size();
    if (pools < 1 || pools > kMaxPagedPools)
        throw InvalidArgument("paged.k_pools", "it holds " + std::to_string(pools) + " pools; give 1 to " +
                                                   std::to_string(kMaxPagedPools) + ".");
    if (paged.v_pools.size() != pools)
        throw InvalidArgument("paged.v_pools", "it holds " + std::to_string(paged.v_pools.size()) +
                                                   " pools but paged.k_pools holds " + std::to_string(pools) + ".");
    const DeviceTensor& first = paged.k_pools[0];
    if (!first.defined()) throw_empty("paged.k_pools[0]");
    PagedSpec spec;
    spec.block_size = first.shape()[1];
    spec.table_stride = ts[3];
    spec.blocks_per_pool = first.shape()[0];
    spec.pools = static_cast<std::int64_t>(pools);
    const std::int64_t kv_heads = first.shape()[2];
    const std::int64_t dim_k = first.shape()[3], dim_v = paged.v_pools[0].defined() ? paged.v_pools[0].shape()[3] : 0;
    // The first pool's layout in rows of D (strides[3] == 1, the others multiples of D).
    const auto& fs = first.strides();
    if (dim_k > 0) spec.units = {fs[0] / dim_k, fs[1] / dim_k, fs[2] / dim_k};
    for (std::size_t i = 0; i < pools; ++i)
        for (const bool is_v : {false, true}) {
            const DeviceTensor& pool = is_v ? paged.v_pools[i] : paged.k_pools[i];
            const std::string name = indexed(is_v ? "paged.v_pools" : "paged.k_pools", i);
            if (!pool.defined()) throw_empty(name.c_str());
            const auto& s = pool.shape();
            const std::int64_t D = is_v ? dim_v : dim_k, blocks = paged.k_pools[i].shape()[0];
            const auto& st = pool.strides();
            std::string why;
            const DType dtype = (is_v ? paged.v_pools[0] : first).dtype();  // K and V may differ
            if (pool.dtype() != dtype) why = "its dtype is " + to_string(pool.dtype()) + ", not " + to_string(dtype);
            else if (s[1] != spec.block_size || s[2] != kv_heads) why = "its block size and heads differ from paged.k_pools[0]'s";
            else if (s[3] != D) why = "its head dimension differs from the first pool's";
            else if (s[0] != blocks) why = "it holds another number of blocks than paged.k_pools[" + std::to_string(i) + "]";
            else if (i + 1 < pools && blocks != spec.blocks_per_pool)
                why = "every pool but the last must hold as many blocks as the first (" + std::to_string(spec.blocks_per_pool) + ")";
            else if (blocks > spec.blocks_per_pool)
                why = "the last pool may not hold more blocks than the first (" + std::to_string(spec.blocks_per_pool) + ")";
            else if (st[3] != 1 || span_bytes(pool) != packed_bytes(pool) ||
                     st[0] != spec.units[0] * D || st[1] != spec.units[1] * D || st[2] != spec.units[2] * D)
                why = "its strides " + shape_text(st) + " are not the first K pool's layout (" + shape_text(fs) +
                      " in rows of " + std::to_string(dim_k) + ") in rows of its own D, without gaps";
            if (!why.empty())
                throw InvalidArgument(name.c_str(), why + "; pools are [blocks, block_size, Hkv, D], shape " + shape_text(s) + ".");
        }
    for (const DeviceTensor& pool : paged.k_pools) spec.blocks += pool.shape()[0];
    spec.k_pool_bytes = span_bytes(first);
    spec.v_pool_bytes = span_bytes(paged.v_pools[0]);
    return spec;
}

TensorLayout paged_layout(const PagedSpec& spec, DType dtype, std::int64_t batch, std::int64_t kv_heads, std::int64_t dim) {
    const std::int64_t row = kv_heads * dim;
    return {dtype, {batch, kv_heads, checked_mul(spec.table_stride, spec.block_size, "the paged key count"), dim},
            {checked_mul(spec.table_stride * spec.block_size, row, "the paged K/V's size"), dim, row, 1}};
}

std::string paged_text(const PagedSpec& spec) {
    return "block_size " + std::to_string(spec.block_size) + ", " + std::to_string(spec.blocks) + " blocks in " +
           std::to_string(spec.pools) + (spec.pools == 1 ? " pool" : " pools") + " of " +
           std::to_string(spec.blocks_per_pool) + ", " + std::to_string(spec.table_stride) + " table entries per sequence";
}

}  // namespace vkattn::detail

#include "plan/paged_kv.hpp"

#include <string>

#include "attention/kernels.hpp"
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
    std::int64_t dim_v = 0;
    for (std::size_t i = 0; i < pools; ++i)
        for (const auto& [pool, list] : {std::pair{&paged.k_pools[i], "paged.k_pools"}, std::pair{&paged.v_pools[i], "paged.v_pools"}}) {
            const std::string name = indexed(list, i);
            if (!pool->defined()) throw_empty(name.c_str());
            const auto& s = pool->shape();
            const bool is_v = pool == &paged.v_pools[i];
            if (is_v && i == 0) dim_v = s[3];
            const std::int64_t blocks = paged.k_pools[i].shape()[0];
            std::string why;
            if (pool->dtype() != first.dtype()) why = "its dtype is " + to_string(pool->dtype()) + ", not " + to_string(first.dtype());
            else if (!pool->contiguous()) why = "it must be contiguous";
            else if (s[1] != spec.block_size || s[2] != kv_heads) why = "its block size and heads differ from paged.k_pools[0]'s";
            else if (s[3] != (is_v ? dim_v : first.shape()[3])) why = "its head dimension differs from the first pool's";
            else if (s[0] != blocks) why = "it holds another number of blocks than paged.k_pools[" + std::to_string(i) + "]";
            else if (i + 1 < pools && blocks != spec.blocks_per_pool)
                why = "every pool but the last must hold as many blocks as the first (" + std::to_string(spec.blocks_per_pool) + ")";
            else if (blocks > spec.blocks_per_pool)
                why = "the last pool may not hold more blocks than the first (" + std::to_string(spec.blocks_per_pool) + ")";
            if (!why.empty())
                throw InvalidArgument(name.c_str(), why + "; pools are [blocks, block_size, Hkv, D], shape " + shape_text(s) + ".");
        }
    for (const DeviceTensor& pool : paged.k_pools) spec.blocks += pool.shape()[0];
    const auto eb = static_cast<std::int64_t>(size_of(first.dtype()));
    spec.k_pool_bytes = static_cast<std::uint64_t>(checked_mul(spec.blocks_per_pool, spec.block_size * kv_heads * first.shape()[3] * eb, "a pool's size"));
    spec.v_pool_bytes = static_cast<std::uint64_t>(checked_mul(spec.blocks_per_pool, spec.block_size * kv_heads * dim_v * eb, "a pool's size"));
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

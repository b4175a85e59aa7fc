#include "vkattn/paged_kv_cache.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "attention/io.hpp"
#include "attention/kernels.hpp"
#include "cache/append.hpp"
#include "cache/cache_args.hpp"
#include "plan/paged_kv.hpp"
#include "plan/program_cache.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vk/device.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "tensor/storage_rules.hpp"

namespace vkattn {
namespace detail {

struct PagedKvCacheState {
    Runtime* runtime = nullptr;
    PagedKvCacheOptions options;
    std::vector<DeviceTensor> k_pools, v_pools;
    DeviceTensor table, lengths, counts;  // counts: [B] i32, the per-sequence counts of the last append that had them
    DeviceTensor scales;                  // f32 [2·Hkv]: the append's fp8 scales (cache_args.hpp's CacheTypes)
    AppendPools append_pools;             // the pools and table as the append shader binds them
    ProgramCache appends{4};              // per new-row tensors' memory, shape and strides

    // The host's record (guarded by mutex): lengths, the table, how many entries name each block,
    // and the blocks no entry names.
    std::mutex mutex;
    std::vector<std::int32_t> recorded, host_table, refs;
    std::set<std::int32_t> free;

    std::int64_t capacity() const { return options.max_blocks_per_seq * options.block_size; }
    std::int32_t& entry(std::size_t b, std::int64_t e) {
        return host_table[b * static_cast<std::size_t>(options.max_blocks_per_seq) + static_cast<std::size_t>(e)];
    }
    // Table entries sequence b's first `length` keys use.
    std::int64_t entries_for(std::int64_t length) const { return (length + options.block_size - 1) / options.block_size; }
    void take(std::int32_t block) {
        if (refs[static_cast<std::size_t>(block)]++ == 0) free.erase(block);
    }
    void release(std::int32_t block) {
        if (--refs[static_cast<std::size_t>(block)] == 0) free.insert(block);
    }
    void upload_table(BatchState& batch) const {
        batch.upload(table, make_view(static_cast<const void*>(host_table.data()), DType::i32, Layout::bhnd, table.shape()));
    }
};

namespace {

CacheShape cache_shape(const PagedKvCacheOptions& o) { return {o.batch, o.kv_heads, o.dim, o.dim_v}; }

// Blocks per pool: as many as one binding holds (storage range and, for the texel loads, the
// texel count of an R32_UINT view: the fused kernels read any type through one where Q, K or V is
// not f32/f16, and Q's type is not known here), of K's and V's alike (their pools pair up), then
// whole pools of them.
std::int64_t blocks_per_pool(const Runtime& runtime, const PagedKvCacheOptions& o, const CacheTypes& types) {
    const auto& caps = runtime.device().caps();
    std::uint64_t limit = std::min(runtime.max_binding_bytes(), caps.max_texel_buffer_elements * view_bytes(TexelView::r32ui));
    std::uint64_t block = 0;
    for (const auto& [t, dim] : {std::pair{types.k, o.dim}, std::pair{types.v, o.dim_v}})
        block = std::max(block, storage_bytes(t, o.block_size * o.kv_heads * dim));
    limit = limit / 16 * 16;
    if (block > limit)
        throw ResourceLimit("block_size: one block of K or V (" + std::to_string(block) +
                            " bytes) passes the device's binding limit of " + std::to_string(limit) +
                            " bytes; use smaller blocks.");
    const auto per_pool = static_cast<std::int64_t>(limit / block);
    const std::int64_t pools = (o.num_blocks + per_pool - 1) / per_pool;
    if (pools > static_cast<std::int64_t>(kMaxPagedPools))
        throw ResourceLimit("num_blocks: " + std::to_string(o.num_blocks) + " blocks of " + std::to_string(block) +
                            " bytes need " + std::to_string(pools) + " bindings of the device's limit of " +
                            std::to_string(limit) + " bytes; the kernels bind at most " +
                            std::to_string(kMaxPagedPools) + " pools (" + std::to_string(kMaxPagedPools * per_pool) +
                            " blocks).");
    return std::min(per_pool, o.num_blocks);
}

void check_batch(const PagedKvCacheState& s, const BatchState& batch) {
    if (batch.runtime != s.runtime) throw InvalidArgument("batch", "the batch belongs to another Context than the cache.");
}

}  // namespace
}  // namespace detail

PagedKvCache::PagedKvCache(Context& context, const PagedKvCacheOptions& options)
    : state_(std::make_shared<detail::PagedKvCacheState>()) {
    detail::PagedKvCacheState& s = *state_;
    s.runtime = &detail::ContextAccess::runtime(context);
    s.options = options;
    PagedKvCacheOptions& o = s.options;
    if (o.dim_v == 0) o.dim_v = o.dim;
    if (o.max_blocks_per_seq == 0) o.max_blocks_per_seq = o.num_blocks;
    constexpr std::int64_t kMost = 0x7fffffff;  // lengths and block ids are int32 on the device
    detail::check_size(o.batch, kMost, "batch");
    detail::check_size(o.kv_heads, kMost, "kv_heads");
    detail::check_size(o.num_blocks, kMost, "num_blocks");
    detail::check_size(o.block_size, kMost, "block_size");
    detail::check_size(o.max_blocks_per_seq, kMost / o.block_size, "max_blocks_per_seq");
    detail::check_size(o.dim, kMost, "dim");
    detail::check_size(o.dim_v, kMost, "dim_v");
    const detail::CacheTypes types =
        detail::check_cache_types(*s.runtime, o.dtype, o.dtype_v, o.kv_heads, o.dim, o.dim_v, o.k_scale, o.v_scale);
    o.dtype_v = types.v;
    const std::int64_t per_pool = detail::blocks_per_pool(*s.runtime, o, types);
    for (std::int64_t first = 0; first < o.num_blocks; first += per_pool) {
        const std::int64_t blocks = std::min(per_pool, o.num_blocks - first);
        // Head-major within a block (Layout::bnhd of [blocks, block_size, Hkv, D]): one head's rows
        // of a block lie together, as a kernel streaming one head reads them.
        s.k_pools.push_back(DeviceTensor::empty(context, types.k, {blocks, o.block_size, o.kv_heads, o.dim}, Layout::bnhd));
        s.v_pools.push_back(DeviceTensor::empty(context, types.v, {blocks, o.block_size, o.kv_heads, o.dim_v}, Layout::bnhd));
    }
    s.table = DeviceTensor::empty(context, DType::i32, {o.batch, 1, 1, o.max_blocks_per_seq});
    s.lengths = DeviceTensor::empty(context, DType::i32, {o.batch, 1, 1, 1});
    s.counts = DeviceTensor::empty(context, DType::i32, {1, 1, 2, o.batch});
    s.scales = DeviceTensor::empty(context, DType::f32, {1, 1, 1, 2 * o.kv_heads});
    const auto B = static_cast<std::size_t>(o.batch);
    s.recorded.assign(B, 0);
    s.host_table.assign(B * static_cast<std::size_t>(o.max_blocks_per_seq), -1);
    s.refs.assign(static_cast<std::size_t>(o.num_blocks), 0);
    for (std::int32_t block = 0; block < o.num_blocks; ++block) s.free.insert(s.free.end(), block);

    const DevicePagedKv paged{s.k_pools, s.v_pools, s.table};
    const detail::PagedSpec spec = detail::paged_spec(paged);
    detail::Problem geometry;  // what paged_operands reads
    geometry.Hkv = o.kv_heads;
    geometry.Dk = o.dim;
    geometry.Dv = o.dim_v;
    const detail::PagedOperands operands = detail::paged_operands(spec, geometry);
    s.append_pools = {s.k_pools, s.v_pools, s.table, operands.addressing, operands.k, operands.v};

    // Zero the pools, lengths and counts and fill the table with -1, whole buffers: one
    // submission, waited on.
    Batch batch(context);
    detail::BatchState& state = detail::BatchAccess::state(batch);
    auto fill = [&](const DeviceTensor& t, std::uint32_t word) {
        state.keep(detail::TensorAccess::storage(t));
        vkCmdFillBuffer(state.begin_op(), detail::TensorAccess::storage(t)->buffer.get(), 0, VK_WHOLE_SIZE, word);
    };
    for (std::size_t i = 0; i < s.k_pools.size(); ++i) {
        fill(s.k_pools[i], 0);
        fill(s.v_pools[i], 0);
    }
    fill(s.table, 0xffffffffu);
    fill(s.lengths, 0);
    fill(s.counts, 0);
    state.upload(s.scales, make_view(static_cast<const void*>(types.scales.data()), DType::f32, Layout::bhnd, s.scales.shape()));
    batch.submit().wait();
}

PagedKvCache::~PagedKvCache() = default;
PagedKvCache::PagedKvCache(const PagedKvCache&) = default;
PagedKvCache& PagedKvCache::operator=(const PagedKvCache&) = default;

const PagedKvCacheOptions& PagedKvCache::options() const { return state_->options; }
const std::vector<DeviceTensor>& PagedKvCache::k_pools() const { return state_->k_pools; }
const std::vector<DeviceTensor>& PagedKvCache::v_pools() const { return state_->v_pools; }
const DeviceTensor& PagedKvCache::block_table() const { return state_->table; }
const DeviceTensor& PagedKvCache::lengths() const { return state_->lengths; }
std::int64_t PagedKvCache::capacity() const { return state_->capacity(); }

std::vector<std::int32_t> PagedKvCache::recorded_lengths() const {
    std::lock_guard lock(state_->mutex);
    return state_->recorded;
}

std::vector<std::int32_t> PagedKvCache::recorded_block_table() const {
    std::lock_guard lock(state_->mutex);
    return state_->host_table;
}

std::int64_t PagedKvCache::free_blocks() const {
    std::lock_guard lock(state_->mutex);
    return static_cast<std::int64_t>(state_->free.size());
}

DeviceAttentionInputs PagedKvCache::inputs(const DeviceTensor& q) const {
    DeviceAttentionInputs in;
    in.q = q;
    in.paged = {state_->k_pools, state_->v_pools, state_->table};
    in.kv_lengths = state_->lengths;
    in.k_scale = state_->options.k_scale;
    in.v_scale = state_->options.v_scale;
    return in;
}

void PagedKvCache::append(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                          std::span<const std::int32_t> counts) {
    detail::check_batch(*state_, detail::BatchAccess::state(batch));
    append_rows(batch, k_new, v_new, detail::appended_rows(*state_->runtime, detail::cache_shape(state_->options), k_new, v_new, counts));
}

void PagedKvCache::append_packed(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                                 std::span<const std::int32_t> cu_seqlens) {
    detail::check_batch(*state_, detail::BatchAccess::state(batch));
    append_rows(batch, k_new, v_new,
                detail::packed_rows(*state_->runtime, detail::cache_shape(state_->options), k_new, v_new, cu_seqlens));
}

void PagedKvCache::append_rows(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                               const detail::AppendRows& rows) {
    detail::PagedKvCacheState& s = *state_;
    detail::BatchState& state = detail::BatchAccess::state(batch);
    const std::vector<std::int64_t>& added = rows.added;
    const std::size_t B = added.size();

    std::lock_guard lock(s.mutex);  // appends to one cache are recorded one at a time
    // Check everything before changing anything: capacity, shared blocks, free blocks.
    std::size_t needed = 0;
    for (std::size_t b = 0; b < B; ++b) {
        if (added[b] == 0) continue;
        const std::int64_t length = s.recorded[b], end = length + added[b];
        if (end > s.capacity())
            throw InvalidArgument("k_new", "sequence " + std::to_string(b) + " holds " + std::to_string(length) +
                                               " of its " + std::to_string(s.capacity()) + " keys; " +
                                               std::to_string(added[b]) + " more would pass the capacity.");
        for (std::int64_t e = length / s.options.block_size; e < s.entries_for(end); ++e) {
            const std::int32_t block = s.entry(b, e);
            if (block < 0) {
                ++needed;
            } else if (s.refs[static_cast<std::size_t>(block)] > 1) {
                throw InvalidArgument("k_new", "sequence " + std::to_string(b) + "'s rows would land in block " +
                                                   std::to_string(block) + ", which another table entry also names; "
                                                   "shared blocks are read-only (copy it and set the table first).");
            }
        }
    }
    if (needed > s.free.size())
        throw InvalidArgument("k_new", "the append needs " + std::to_string(needed) + " more blocks but " +
                                           std::to_string(s.free.size()) + " of the cache's " +
                                           std::to_string(s.options.num_blocks) + " are free.");
    if (needed > 0) {
        for (std::size_t b = 0; b < B; ++b) {
            if (added[b] == 0) continue;
            const std::int64_t length = s.recorded[b];
            for (std::int64_t e = length / s.options.block_size; e < s.entries_for(length + added[b]); ++e)
                if (s.entry(b, e) < 0) {
                    const std::int32_t block = *s.free.begin();
                    s.take(block);
                    s.entry(b, e) = block;
                }
        }
        s.upload_table(state);
    }

    detail::run_append(*s.runtime, state, s.appends,
                       {.k_new = k_new,
                        .v_new = v_new,
                        .pools = &s.append_pools,
                        .lengths = s.lengths,
                        .counts = s.counts,
                        .scales = s.scales,
                        .mode = rows.mode,
                        .new_rows = rows.new_rows},
                       rows.values);
    for (std::size_t b = 0; b < B; ++b) s.recorded[b] += static_cast<std::int32_t>(added[b]);
}

void PagedKvCache::set_block_table(Batch& batch, std::span<const std::int32_t> table) {
    detail::PagedKvCacheState& s = *state_;
    detail::BatchState& state = detail::BatchAccess::state(batch);
    detail::check_batch(s, state);
    const auto M = s.options.max_blocks_per_seq;
    if (table.size() != s.host_table.size())
        throw InvalidArgument("table", "it holds " + std::to_string(table.size()) + " entries but the cache's table has " +
                                           std::to_string(s.options.batch) + " × " + std::to_string(M) + ".");
    for (std::size_t i = 0; i < table.size(); ++i)
        if (table[i] < -1 || table[i] >= s.options.num_blocks)
            throw InvalidArgument("table", "table[" + std::to_string(i) + "] = " + std::to_string(table[i]) +
                                               " is neither -1 nor a block id in [0, " +
                                               std::to_string(s.options.num_blocks) + ").");
    std::lock_guard lock(s.mutex);
    for (std::size_t b = 0; b < s.recorded.size(); ++b)
        for (std::int64_t e = 0; e < s.entries_for(s.recorded[b]); ++e)
            if (table[b * static_cast<std::size_t>(M) + static_cast<std::size_t>(e)] < 0)
                throw InvalidArgument("table", "sequence " + std::to_string(b) + " holds " + std::to_string(s.recorded[b]) +
                                                   " keys, so its entries 0 to " + std::to_string(s.entries_for(s.recorded[b]) - 1) +
                                                   " must name blocks; entry " + std::to_string(e) + " is -1.");
    for (const std::int32_t block : s.host_table)
        if (block >= 0) s.release(block);
    s.host_table.assign(table.begin(), table.end());
    for (const std::int32_t block : s.host_table)
        if (block >= 0) s.take(block);
    s.upload_table(state);
}

void PagedKvCache::reset(Batch& batch, std::span<const std::int32_t> lengths) {
    detail::PagedKvCacheState& s = *state_;
    detail::BatchState& state = detail::BatchAccess::state(batch);
    detail::check_batch(s, state);
    std::vector<std::int32_t> values = detail::reset_lengths(detail::cache_shape(s.options), lengths, s.capacity());
    std::lock_guard lock(s.mutex);
    bool table_changed = false;
    for (std::size_t b = 0; b < values.size(); ++b)
        for (std::int64_t e = s.entries_for(values[b]); e < s.options.max_blocks_per_seq; ++e)
            if (std::int32_t& block = s.entry(b, e); block >= 0) {
                s.release(block);
                block = -1;
                table_changed = true;
            }
    if (table_changed) s.upload_table(state);
    state.upload(s.lengths, make_view(static_cast<const void*>(values.data()), DType::i32, Layout::bhnd,
                                      {s.options.batch, 1, 1, 1}));
    s.recorded = std::move(values);
}

}  // namespace vkattn

#include "vkattn/kv_cache.hpp"

#include <algorithm>
#include <mutex>
#include <string>

#include "attention/problem.hpp"
#include "cache/append.hpp"
#include "cache/cache_args.hpp"
#include "plan/program_cache.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace detail {

namespace {

CacheShape cache_shape(const KvCacheOptions& o) { return {o.batch, o.kv_heads, o.dim, o.dim_v}; }

}  // namespace

struct KvCacheState {
    Runtime* runtime = nullptr;
    KvCacheOptions options;
    DeviceTensor k, v, lengths, counts;  // counts: [B] i32, the per-sequence counts of the last append that had them
    DeviceTensor scales;                // f32 [2·Hkv]: the append's fp8 scales (cache_args.hpp's CacheTypes)
    std::mutex mutex;                   // guards recorded
    std::vector<std::int32_t> recorded;
    ProgramCache appends{4};  // per new-row tensors' memory, shape and strides
};

}  // namespace detail

KvCache::KvCache(Context& context, const KvCacheOptions& options) : state_(std::make_shared<detail::KvCacheState>()) {
    detail::KvCacheState& s = *state_;
    s.runtime = &detail::ContextAccess::runtime(context);
    s.options = options;
    if (s.options.dim_v == 0) s.options.dim_v = s.options.dim;
    constexpr std::int64_t kMost = 0x7fffffff;  // lengths are int32 on the device
    detail::check_size(s.options.batch, kMost, "batch");
    detail::check_size(s.options.kv_heads, kMost, "kv_heads");
    detail::check_size(s.options.capacity, kMost, "capacity");
    detail::check_size(s.options.dim, kMost, "dim");
    detail::check_size(s.options.dim_v, kMost, "dim_v");
    const detail::CacheTypes types =
        detail::check_cache_types(*s.runtime, s.options.dtype, s.options.dtype_v, s.options.kv_heads, s.options.dim,
                                  s.options.dim_v, s.options.k_scale, s.options.v_scale);
    s.options.dtype_v = types.v;
    const std::int64_t B = s.options.batch, H = s.options.kv_heads, N = s.options.capacity;
    s.k = DeviceTensor::empty(context, types.k, {B, H, N, s.options.dim});
    s.v = DeviceTensor::empty(context, types.v, {B, H, N, s.options.dim_v});
    s.scales = DeviceTensor::empty(context, DType::f32, {1, 1, 1, 2 * H});
    s.lengths = DeviceTensor::empty(context, DType::i32, {B, 1, 1, 1});
    s.counts = DeviceTensor::empty(context, DType::i32, {1, 1, 2, B});
    s.recorded.assign(static_cast<std::size_t>(B), 0);
    // Zero everything, whole buffers (their padding too): one submission, waited on.
    Batch batch(context);
    detail::BatchState& state = detail::BatchAccess::state(batch);
    for (const DeviceTensor* t : {&s.k, &s.v, &s.lengths, &s.counts}) {
        state.keep(detail::TensorAccess::storage(*t));
        vkCmdFillBuffer(state.begin_op(), detail::TensorAccess::storage(*t)->buffer.get(), 0, VK_WHOLE_SIZE, 0);
    }
    state.upload(s.scales, make_view(static_cast<const void*>(types.scales.data()), DType::f32, Layout::bhnd, s.scales.shape()));
    batch.submit().wait();
}

KvCache::~KvCache() = default;
KvCache::KvCache(const KvCache&) = default;
KvCache& KvCache::operator=(const KvCache&) = default;

const KvCacheOptions& KvCache::options() const { return state_->options; }
const DeviceTensor& KvCache::k() const { return state_->k; }
const DeviceTensor& KvCache::v() const { return state_->v; }
const DeviceTensor& KvCache::lengths() const { return state_->lengths; }

std::vector<std::int32_t> KvCache::recorded_lengths() const {
    std::lock_guard lock(state_->mutex);
    return state_->recorded;
}

DeviceAttentionInputs KvCache::inputs(const DeviceTensor& q) const {
    DeviceAttentionInputs in;
    in.q = q;
    in.k = state_->k;
    in.v = state_->v;
    in.kv_lengths = state_->lengths;
    in.k_scale = state_->options.k_scale;
    in.v_scale = state_->options.v_scale;
    return in;
}

void KvCache::append(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                     std::span<const std::int32_t> counts) {
    detail::KvCacheState& s = *state_;
    if (detail::BatchAccess::state(batch).runtime != s.runtime)
        throw InvalidArgument("batch", "the batch belongs to another Context than the cache.");
    append_rows(batch, k_new, v_new, detail::appended_rows(*s.runtime, detail::cache_shape(s.options), k_new, v_new, counts));
}

void KvCache::append_packed(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                            std::span<const std::int32_t> cu_seqlens) {
    detail::KvCacheState& s = *state_;
    if (detail::BatchAccess::state(batch).runtime != s.runtime)
        throw InvalidArgument("batch", "the batch belongs to another Context than the cache.");
    append_rows(batch, k_new, v_new, detail::packed_rows(*s.runtime, detail::cache_shape(s.options), k_new, v_new, cu_seqlens));
}

void KvCache::append_rows(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new,
                          const detail::AppendRows& rows) {
    detail::KvCacheState& s = *state_;
    detail::BatchState& state = detail::BatchAccess::state(batch);
    const std::vector<std::int64_t>& added = rows.added;
    const auto B = added.size();

    std::lock_guard lock(s.mutex);  // appends to one cache are recorded one at a time
    for (std::size_t b = 0; b < B; ++b) {
        const std::int64_t count = added[b];
        if (s.recorded[b] + count > s.options.capacity)
            throw InvalidArgument("k_new", "sequence " + std::to_string(b) + " holds " + std::to_string(s.recorded[b]) +
                                               " of its " + std::to_string(s.options.capacity) + " rows; " +
                                               std::to_string(count) + " more would pass the capacity.");
    }
    detail::run_append(*s.runtime, state, s.appends,
                       {.k_new = k_new,
                        .v_new = v_new,
                        .k_cache = s.k,
                        .v_cache = s.v,
                        .lengths = s.lengths,
                        .counts = s.counts,
                        .scales = s.scales,
                        .mode = rows.mode,
                        .new_rows = rows.new_rows},
                       rows.values);
    for (std::size_t b = 0; b < B; ++b) s.recorded[b] += static_cast<std::int32_t>(added[b]);
}

void KvCache::reset(Batch& batch, std::span<const std::int32_t> lengths) {
    detail::KvCacheState& s = *state_;
    detail::BatchState& state = detail::BatchAccess::state(batch);
    if (state.runtime != s.runtime) throw InvalidArgument("batch", "the batch belongs to another Context than the cache.");
    std::vector<std::int32_t> values = detail::reset_lengths(detail::cache_shape(s.options), lengths, s.options.capacity);
    std::lock_guard lock(s.mutex);
    state.upload(s.lengths, make_view(static_cast<const void*>(values.data()), DType::i32, Layout::bhnd,
                                      {s.options.batch, 1, 1, 1}));
    s.recorded = std::move(values);
}

}  // namespace vkattn

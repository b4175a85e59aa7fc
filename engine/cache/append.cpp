#include "cache/append.hpp"

#include <algorithm>
#include <string>

#include "attention/dispatch.hpp"
#include "attention/io.hpp"
#include "attention/kernels.hpp"
#include "submit/batch_state.hpp"
#include "runtime.hpp"
#include "tensor/storage.hpp"
#include "vk/device.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// Packed new rows (varlen) are bound whole, with batch stride 0: sequence b's first row comes
// from the uploaded offsets.
Operand operand_of(const DeviceTensor& t, bool packed = false) {
    const Operand op{t.strides(), element_base(t), TensorAccess::storage(t)->buffer.size()};
    return packed ? op.packed(t.shape()[2]) : op;
}

// A pool (or the table) bound whole: its elements rounded up to 16 bytes, within its buffer.
Slice whole_tensor(const DeviceTensor& t) {
    const vk::Buffer& buffer = TensorAccess::storage(t)->buffer;
    return Slice{t.offset_bytes(), std::min((span_bytes(t) + 15) / 16 * 16, buffer.size() - t.offset_bytes()), {}};
}

// The key of an append's program: the new rows' memory, shapes, strides and dtype, and whether
// counts are read (and how: AppendParams::has_counts), and the rows per sequence.
ProgramKey append_key(const DeviceTensor& k_new, const DeviceTensor& v_new, std::uint32_t mode, std::int64_t new_rows) {
    ProgramKey key;
    for (const DeviceTensor* t : {&k_new, &v_new}) {
        key.storages.push_back(TensorAccess::storage(*t));
        key.offsets.push_back(t->offset_bytes());
        key.signature.insert(key.signature.end(), t->shape().begin(), t->shape().end());
        key.signature.insert(key.signature.end(), t->strides().begin(), t->strides().end());
    }
    key.signature.push_back(static_cast<std::int64_t>(k_new.dtype()));
    key.signature.push_back(mode);
    key.signature.push_back(new_rows);
    return key;
}

}  // namespace

void record_append(Runtime& runtime, Program& program, const AppendTensors& t) {
    const auto& shape = t.k_new.shape();
    const std::int64_t B = t.lengths.elements(), Hkv = shape[1], T = t.new_rows, Dk = shape[3], Dv = t.v_new.shape()[3];
    const bool packed = t.mode == 2;
    const AppendPools* pools = t.pools;
    const std::int64_t capacity = pools ? std::int64_t{pools->addressing.table_stride} * pools->addressing.block_size
                                        : t.k_cache.shape()[2];
    const auto& caps = runtime.device().caps();
    const std::uint64_t limit = runtime.max_binding_bytes(), align = binding_alignment(caps);
    const Operand k_new = operand_of(t.k_new, packed), v_new = operand_of(t.v_new, packed);
    // Paged: the pools are bound whole (the cache made each fit) and the chunks cut only the new
    // rows; the cache rows stay one range.
    const Operand k_cache = pools ? Operand{} : operand_of(t.k_cache), v_cache = pools ? Operand{} : operand_of(t.v_cache);
    const DType k_dtype = pools ? pools->k[0].dtype() : t.k_cache.dtype();
    const DType v_dtype = pools ? pools->v[0].dtype() : t.v_cache.dtype();
    const Unit in_bytes = unit_of(t.k_new.dtype()), k_bytes = unit_of(k_dtype), v_bytes = unit_of(v_dtype);

    // The new rows [t0, t0 + tn) of a chunk's units, and the chunk's cache rows.
    auto new_box = [&](const Chunk& c, std::int64_t t0, std::int64_t tn) { return query_box({c.u0, c.units, t0, tn}, Hkv); };
    auto cache_box = [&](const Chunk& c) { return query_box(c, Hkv); };
    auto fits = [&](const Chunk& c, std::int64_t t0, std::int64_t tn) {
        if (c.units > caps.max_workgroup_count[1]) return false;
        const Box nb = new_box(c, t0, tn), cb = cache_box(c);
        return k_new.slice(Dk, nb, in_bytes, align).range <= limit && v_new.slice(Dv, nb, in_bytes, align).range <= limit &&
               (pools || (k_cache.slice(Dk, cb, k_bytes, align).range <= limit &&
                          v_cache.slice(Dv, cb, v_bytes, align).range <= limit));
    };

    const vk::Kernel& rows_kernel = kv_append_kernel(runtime, t.k_new.dtype(), k_dtype, v_dtype, pools != nullptr);
    AppendParams base;
    base.B = static_cast<std::uint32_t>(B);
    base.Hkv = static_cast<std::uint32_t>(Hkv);
    base.capacity = static_cast<std::uint32_t>(capacity);
    base.new_rows = static_cast<std::uint32_t>(T);
    base.Dk = static_cast<std::uint32_t>(Dk);
    base.Dv = static_cast<std::uint32_t>(Dv);
    base.has_counts = t.mode;
    const Slice lengths = whole(static_cast<std::uint64_t>(B) * 4), counts = whole(static_cast<std::uint64_t>(2 * B) * 4);

    // Packed new rows are bound whole (every run reads from each sequence's first row): refused at
    // once, naming them, when they cannot be.
    if (packed)
        for (const auto& [op, dim, name] : {std::tuple{&k_new, Dk, "k_new"}, std::tuple{&v_new, Dv, "v_new"}})
            if (const Slice whole_rows = op->slice(dim, new_box({0, 1, 0, 1}, 0, 1), in_bytes, align); whole_rows.range > limit)
                throw ResourceLimit(std::string(name) + ": packed new rows are bound whole, and their " +
                                    std::to_string(whole_rows.range) + " bytes pass the device's binding limit of " +
                                    std::to_string(limit) + " bytes; append the sequences in several calls.");
    // New rows in runs of at most one grid's width, halved until some cut of the cache fits.
    std::int64_t run = std::min<std::int64_t>(T, caps.max_workgroup_count[0]);
    for (std::int64_t t0 = 0; t0 < T;) {
        const std::int64_t tn = std::min(run, T - t0);
        const auto chunks = plan_chunks(B * Hkv, pools ? 1 : capacity, 1, [&](const Chunk& c) { return fits(c, t0, tn); });
        if (chunks.empty()) {
            if (tn == 1)
                throw ResourceLimit("k_cache: one row of one head (Dk = " + std::to_string(Dk) + ", Dv = " +
                                    std::to_string(Dv) + ") needs a binding larger than the device's limit of " +
                                    std::to_string(limit) + " bytes.");
            run = (tn + 1) / 2;
            continue;
        }
        for (const Chunk& c : chunks) {
            const Box nb = new_box(c, t0, tn);
            const Slice kn = k_new.slice(Dk, nb, in_bytes, align), vn = v_new.slice(Dv, nb, in_bytes, align);
            AppendParams params = base;
            params.first_new = static_cast<std::uint32_t>(t0);
            params.chunk = {static_cast<std::uint32_t>(c.u0), static_cast<std::uint32_t>(c.r0),
                            static_cast<std::uint32_t>(c.rows)};
            params.k_new = kn.desc;
            params.v_new = vn.desc;
            Dispatch dispatch{&rows_kernel, params,
                              {bind(1, TensorAccess::storage(t.k_new)->buffer, kn),
                               bind(2, TensorAccess::storage(t.v_new)->buffer, vn), bind(5, TensorAccess::storage(t.lengths)->buffer, lengths),
                               bind(6, TensorAccess::storage(t.counts)->buffer, counts),
                               bind(8, TensorAccess::storage(t.scales)->buffer, whole_tensor(t.scales))},
                              {static_cast<std::uint32_t>(tn), static_cast<std::uint32_t>(c.units), 1}};
            if (!pools) {
                const Box cb = cache_box(c);
                const Slice kc = k_cache.slice(Dk, cb, k_bytes, align), vc = v_cache.slice(Dv, cb, v_bytes, align);
                std::get<AppendParams>(dispatch.params).k_cache = kc.desc;
                std::get<AppendParams>(dispatch.params).v_cache = vc.desc;
                dispatch.bindings.push_back(bind(3, TensorAccess::storage(t.k_cache)->buffer, kc));
                dispatch.bindings.push_back(bind(4, TensorAccess::storage(t.v_cache)->buffer, vc));
                program.dispatch(dispatch);
                continue;
            }
            for (std::size_t pool = 0; pool < pools->k.size(); ++pool) {
                Dispatch one = dispatch;
                AppendParams& pp = std::get<AppendParams>(one.params);
                pp.k_cache = pools->k_desc;
                pp.v_cache = pools->v_desc;
                pp.paged = pools->addressing;
                pp.pool = static_cast<std::uint32_t>(pool);
                one.bindings.push_back(bind(3, TensorAccess::storage(pools->k[pool])->buffer, whole_tensor(pools->k[pool])));
                one.bindings.push_back(bind(4, TensorAccess::storage(pools->v[pool])->buffer, whole_tensor(pools->v[pool])));
                one.bindings.push_back(bind(7, TensorAccess::storage(pools->table)->buffer, whole_tensor(pools->table)));
                program.dispatch(one);
            }
        }
        t0 += tn;
    }
    // Every row is written before any length moves: the rows read the lengths.
    program.barrier();
    program.dispatch({&kv_advance_kernel(runtime), base, {bind(5, TensorAccess::storage(t.lengths)->buffer, lengths),
                                                                  bind(6, TensorAccess::storage(t.counts)->buffer, counts)},
                      {static_cast<std::uint32_t>((B + 63) / 64), 1, 1}});
}

void run_append(Runtime& runtime, BatchState& batch, ProgramCache& programs, const AppendTensors& t,
                std::span<const std::int32_t> values) {
    const ProgramKey key = append_key(t.k_new, t.v_new, t.mode, t.new_rows);
    const std::shared_ptr<Program> program =
        programs.find_or_record(key, runtime, [&](Program& p) { record_append(runtime, p, t); });
    if (t.mode != 0) {  // counts, then (packed) first rows: t.counts is [1, 1, 2, B]
        const DeviceTensor target = values.size() == static_cast<std::size_t>(t.counts.elements()) ? t.counts : t.counts.seq(0, 1);
        batch.upload(target, make_view(static_cast<const void*>(values.data()), DType::i32, Layout::bhnd, target.shape()));
    }
    program->replay(batch.begin_op());
    batch.keep(program);
    std::vector<const DeviceTensor*> used{&t.k_new, &t.v_new, &t.lengths, &t.counts, &t.scales};
    if (t.pools) {
        used.push_back(&t.pools->table);
        for (const auto* pools : {&t.pools->k, &t.pools->v})
            for (const DeviceTensor& pool : *pools) used.push_back(&pool);
    } else {
        used.insert(used.end(), {&t.k_cache, &t.v_cache});
    }
    for (const DeviceTensor* tensor : used) batch.keep(TensorAccess::storage(*tensor));
}

}  // namespace vkattn::detail

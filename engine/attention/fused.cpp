#include "attention/fused.hpp"

#include <algorithm>

#include "attention/dispatch.hpp"
#include "attention/io.hpp"
#include "attention/kernels.hpp"
#include "attention/path.hpp"
#include "attention/slicing.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"
#include "tensor/storage_rules.hpp"

namespace vkattn::detail {
namespace {

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
std::uint64_t u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// Chunks here count units as (b, key/value head) and rows as ρ = g·Nq + i over the group's query
// heads; slicing::Chunk holds the same four numbers.
Box fused_query_box(const Chunk& c, const Problem& p) {
    Box box;
    const std::int64_t last = c.u0 + c.units - 1;
    box.b0 = c.u0 / p.Hkv;
    box.b1 = last / p.Hkv;
    const std::int64_t hk0 = c.u0 % p.Hkv, hk1 = last % p.Hkv;
    const std::int64_t g0 = c.r0 / p.Nq, g1 = (c.r0 + c.rows - 1) / p.Nq;
    if (box.b0 != box.b1) {
        box.h0 = 0;
        box.h1 = p.Hq - 1;
    } else {
        box.h0 = hk0 * p.group + g0;
        box.h1 = hk1 * p.group + g1;
    }
    const bool one_head = c.units == 1 && g0 == g1;
    box.n0 = one_head ? c.r0 % p.Nq : 0;
    box.n1 = one_head ? (c.r0 + c.rows - 1) % p.Nq : p.Nq - 1;
    return box;
}

Box fused_kv_box(const Chunk& c, const Problem& p, Features keys) {
    Box box;
    const std::int64_t last = c.u0 + c.units - 1;
    box.b0 = c.u0 / p.Hkv;
    box.b1 = last / p.Hkv;
    box.h0 = box.b0 == box.b1 ? c.u0 % p.Hkv : 0;
    box.h1 = box.b0 == box.b1 ? last % p.Hkv : p.Hkv - 1;
    box.n0 = keys.begin;
    box.n1 = keys.begin + std::max<std::int64_t>(keys.length, 1) - 1;
    return box;
}

// A chunk-local dense [units][rows][width] scratch, addressed like a [B, Hq, Nq, width] tensor
// from the chunk's first (b, h, i): (u − u0)·rows·width + (ρ − r0)·width.
TensorDesc chunk_local(const Chunk& c, const Problem& p, std::int64_t width) {
    TensorDesc d;
    d.stride = {u32(p.Hq * p.Nq * width), u32(p.Nq * width), u32(width), 1};
    d.origin = {u32(c.u0 / p.Hkv), u32((c.u0 % p.Hkv) * p.group + c.r0 / p.Nq), u32(c.r0 % p.Nq), 0};
    return d;
}

// How the keys are cut. The fused kernel (splits = 0) sees every key in one binding. Split-KV runs
// `splits` slices of `keys_per_split` keys each and merges them (combine.comp); when K or V of every
// key would exceed one binding, the slices are bound `per_binding` at a time, one dispatch each, so
// a head of any length runs (a fused request whose keys do not fit becomes such a split run).
struct KeyPlan {
    std::uint32_t splits = 0;
    std::int64_t keys_per_split = 0;
    std::uint32_t per_binding = 1;

    static KeyPlan fused(std::int64_t Nkv) { return {0, Nkv, 1}; }
    // `wanted` slices of whole key blocks; none of them empty.
    static KeyPlan split(std::int64_t Nkv, std::int64_t wanted, std::int64_t key_block, std::int64_t per_binding) {
        const std::int64_t keys = std::max<std::int64_t>(1, (Nkv + wanted - 1) / wanted);
        const std::int64_t per_split = (keys + key_block - 1) / key_block * key_block;
        const auto splits = static_cast<std::uint32_t>(std::max<std::int64_t>(1, (Nkv + per_split - 1) / per_split));
        return {splits, per_split, static_cast<std::uint32_t>(std::clamp<std::int64_t>(per_binding, 1, splits))};
    }
    bool split_mode() const { return splits > 0; }
    std::uint32_t bindings() const { return split_mode() ? (splits + per_binding - 1) / per_binding : 1; }
    std::uint32_t first_split(std::uint32_t binding) const { return binding * per_binding; }
    std::uint32_t splits_in(std::uint32_t binding) const {
        return split_mode() ? std::min(per_binding, splits - first_split(binding)) : 1;
    }
    // The keys one binding holds.
    Features keys(std::uint32_t binding, std::int64_t Nkv) const {
        if (!split_mode()) return {0, Nkv};
        const std::int64_t begin = first_split(binding) * keys_per_split;
        return {begin, std::min(Nkv, begin + splits_in(binding) * keys_per_split) - begin};
    }
};

struct KeySlices {
    Slice k, v;
    MaskSlices masks;
};
struct FusedSlices {
    Slice q, o, lse;
};

class FusedPlanner {
public:
    FusedPlanner(const Runtime& runtime, const Problem& p, const Operands& operands, const FusedConfig& config,
                 std::uint32_t splits)
        : p_(p), ops_(operands), config_(config), splits_(splits),
          caps_(runtime.device().caps()), limit_(runtime.max_binding_bytes()), align_(binding_alignment(caps_)),
          texel_elements_(caps_.max_texel_buffer_elements) {}

    FusedSlices slices(const Chunk& c) const {
        const Box qb = fused_query_box(c, p_);
        FusedSlices s;
        s.q = ops_.q.slice(p_.Dk, qb, unit_of(p_.dtype), align_);
        s.o = ops_.o.slice(p_.Dv, qb, unit_of(p_.dtype), align_);
        s.lse = ops_.lse.slice(1, qb, 4, align_);
        return s;
    }

    // K, V and the masks' columns for one binding's keys; the kernel indexes all of them by absolute
    // key index.
    KeySlices key_slices(const Chunk& c, Features keys) const {
        const Box kb = fused_kv_box(c, p_, keys);
        KeySlices s;
        s.k = ops_.k.slice(p_.Dk, kb, unit_of(p_.k_dtype), align_);
        s.v = ops_.v.slice(p_.Dv, kb, unit_of(p_.v_dtype), align_);
        s.masks = mask_slices(p_, ops_, fused_query_box(c, p_), align_, keys);
        return s;
    }

    const std::optional<PagedOperands>& paged() const { return ops_.paged; }

    std::uint64_t partial_o_bytes(const Chunk& c, const KeyPlan& keys) const {
        return u64(std::max(1u, keys.splits)) * u64(c.units * c.rows * p_.Dv) * 4;
    }
    std::uint64_t partial_lse_bytes(const Chunk& c, const KeyPlan& keys) const {
        return u64(std::max(1u, keys.splits)) * u64(c.units * c.rows) * 4;
    }

    // The first binding or grid dimension the chunk exceeds, or nullptr when it fits.
    const char* overflow(const Chunk& c, const KeyPlan& keys) const {
        if (c.units > caps_.max_workgroup_count[1] || c.rows > caps_.max_workgroup_count[0]) return "the workgroup grid";
        if (keys.per_binding > caps_.max_workgroup_count[2]) return "the split count";
        if (keys.split_mode() && partial_o_bytes(c, keys) > limit_) return "the split partial outputs";
        auto over = [&](const Slice& slice, std::optional<TexelView> texel) {
            return slice.range > limit_ || (texel && slice.range > texel_limit(*texel));
        };
        const FusedSlices s = slices(c);
        if (over(s.q, q_texel())) return "q";
        if (over(s.o, {})) return "o";
        if (over(s.lse, {})) return "lse";
        if (ops_.paged) {  // each pool is bound whole
            if (over(whole(ops_.paged->k_pool_bytes), k_texel())) return "k_pools";
            if (over(whole(ops_.paged->v_pool_bytes), v_texel())) return "v_pools";
        }
        for (std::uint32_t binding = 0; binding < keys.bindings(); ++binding) {
            const KeySlices k = key_slices(c, keys.keys(binding, p_.Nkv));
            if (!ops_.paged && over(k.k, k_texel())) return "k";
            if (!ops_.paged && over(k.v, v_texel())) return "v";
            if (over(k.masks.bool_mask, {})) return "bool_mask";
            if (over(k.masks.float_mask, {})) return "float_mask";
        }
        return nullptr;
    }

    struct Plan {
        KeyPlan keys;
        std::vector<Chunk> chunks;
    };

    // As many whole (b, kv head) units per chunk as fit, one unit cut into row blocks if needed; and
    // when even one row's K/V (or mask row) exceeds a binding, the keys bound in slices, as many
    // splits per binding as fit (bit-identical to the unsliced split run with the same splits).
    Plan plan() const {
        // Packed (varlen) tensors are bound whole: only the device knows where a sequence's rows lie.
        if (p_.packed_q) {
            const FusedSlices s = slices({0, 1, 0, 1});
            const KeySlices k = key_slices({0, 1, 0, 1}, {0, p_.Nkv});
            auto check = [&](const Slice& slice, std::optional<TexelView> texel, const char* name) {
                const std::uint64_t most = texel ? std::min(limit_, texel_limit(*texel)) : limit_;
                if (slice.range > most)
                    throw ResourceLimit(std::string(name) + ": a packed (varlen) tensor is bound whole, and its " +
                                        std::to_string(slice.range) + " bytes pass the device's binding limit of " +
                                        std::to_string(most) + " bytes; run the sequences in several calls.");
            };
            check(s.q, q_texel(), "q");
            check(s.o, {}, "o");
            check(s.lse, {}, "lse");
            if (p_.packed_k) {
                check(k.k, k_texel(), "k");
                check(k.v, v_texel(), "v");
            }
        }
        const std::int64_t key_block = config_.key_block();
        auto chunks_for = [&](const KeyPlan& keys) {
            return plan_chunks(p_.B * p_.Hkv, p_.group * p_.Nq, config_.rows_per_workgroup(),
                               [&](const Chunk& c) { return overflow(c, keys) == nullptr; });
        };
        // Devices with a loop budget cap the keys one workgroup visits.
        const std::int64_t most_keys = fused_keys_per_dispatch(caps_, config_, p_);
        std::int64_t wanted = std::max(1u, splits_);
        if (most_keys > 0) wanted = std::max(wanted, (p_.Nkv + most_keys - 1) / most_keys);
        for (;;) {
            const KeyPlan all = splits_ == 0 && wanted == 1 ? KeyPlan::fused(p_.Nkv)
                                                            : KeyPlan::split(p_.Nkv, wanted, key_block, wanted);
            for (std::int64_t per_binding = all.split_mode() ? all.splits : 1;; per_binding = (per_binding + 1) / 2) {
                const KeyPlan keys = all.split_mode() ? KeyPlan::split(p_.Nkv, wanted, key_block, per_binding) : all;
                auto chunks = chunks_for(keys);
                if (!chunks.empty()) return {keys, std::move(chunks)};
                if (per_binding == 1) break;
            }
            if (all.keys_per_split <= key_block) break;  // the keys cannot be cut finer
            wanted = std::max<std::int64_t>(wanted * 2, 2);
        }
        const KeyPlan finest = KeyPlan::split(p_.Nkv, (p_.Nkv + key_block - 1) / key_block, key_block, 1);
        const char* culprit = overflow({0, 1, 0, 1}, finest);
        throw ResourceLimit(std::string(culprit ? culprit : "a binding") +
                            ": even one query row with one block of " + std::to_string(key_block) +
                            " keys needs a binding larger than the device's limit of " + std::to_string(limit_) +
                            " bytes (Dk = " + std::to_string(p_.Dk) + ", Dv = " + std::to_string(p_.Dv) + ").");
    }

private:
    // The view of an operand the config reads through texels (none when it reads words).
    std::optional<TexelView> texel(DType t) const { return config_.texel ? std::optional(config_.view(t)) : std::nullopt; }
    std::optional<TexelView> q_texel() const { return texel(p_.dtype); }
    std::optional<TexelView> k_texel() const { return texel(p_.k_dtype); }
    std::optional<TexelView> v_texel() const { return texel(p_.v_dtype); }
    // Bytes of the largest texel view of a format: maxTexelBufferElements texels.
    std::uint64_t texel_limit(TexelView v) const { return texel_elements_ * view_bytes(v); }

    const Problem& p_;
    Operands ops_;
    const FusedConfig& config_;
    std::uint32_t splits_;
    const vk::DeviceCaps& caps_;
    std::uint64_t limit_, align_;
    std::uint64_t texel_elements_;
};

Varlen varlen(const Problem& p) {
    return {.packed_q = p.packed_q ? 1u : 0u, .packed_k = p.packed_k ? 1u : 0u, .total_q = u32(p.total_q),
            .total_k = u32(p.total_k)};
}

class FusedRun final : public PathRun {
public:
    FusedRun(Runtime& runtime, const Problem& p, const Operands& operands, const FusedConfig& config,
             std::uint32_t splits)
        : runtime_(runtime), p_(p), config_(config), planner_(runtime, p, operands, config_, splits),
          plan_(planner_.plan()) {  // before any allocation: refuse early
        const KeyPlan& keys = plan_.keys;
        report.path = splits > 0 ? Impl::split : Impl::fused;
        report.variant = config.describe();
        if (keys.split_mode())
            report.variant += " splits=" + std::to_string(keys.splits) + " keys/split=" + std::to_string(keys.keys_per_split);
        if (keys.bindings() > 1) report.variant += " key-slices=" + std::to_string(keys.bindings());
        if (config.decode && !operands.paged) {
            // Every binding's rows start where the whole tensor's do, modulo the chunk (slices begin
            // on ≥ 16-byte boundaries): the first chunk's slices decide for all.
            const KeySlices k = planner_.key_slices(plan_.chunks.front(), keys.keys(0, p.Nkv));
            wide_dense_ = decode_wide_rows(k.k.desc, p.k_dtype, p.Dk) && decode_wide_rows(k.v.desc, p.v_dtype, p.Dv);
            report.variant += wide_dense_ ? " loads=16B" : " loads=words";
        }
        report.slices = static_cast<std::uint32_t>(plan_.chunks.size() * keys.bindings());
        report.flops = p.flops();
    }

    std::uint64_t scratch_bytes() const override {
        const auto [o, lse] = partial_bytes();
        return o + lse;
    }

    void record(Program& r, const DeviceBuffers& d) override {
        const auto [partial_o, partial_lse] = partial_bytes();
        const vk::Buffer* o_partial = &r.scratch(partial_o, "the split partial outputs");
        const vk::Buffer* lse_partial = &r.scratch(partial_lse, "the split partial log-sum-exps");
        const KeyPlan& keys = plan_.keys;
        const bool split = keys.split_mode();
        const Problem& p = p_;
        const std::optional<PagedOperands>& paged = planner_.paged();
        if (config_.decode && !split) throw Error("internal: the decode kernel runs split runs only.");
        const std::uint32_t pools = paged ? paged->pools : 0;
        const vk::Kernel& flash =
            config_.decode ? flash_decode_kernel(runtime_, config_, operand_types(p), wide_loads(d), pools)
            : config_.tile ? flash_tile_kernel(runtime_, config_, operand_types(p), split, pools)
                           : flash_kernel(runtime_, config_, operand_types(p), split, pools);
        const vk::Kernel* combine = split ? &combine_kernel(runtime_, p.dtype) : nullptr;
        for (const Chunk& c : plan_.chunks) {
            const FusedSlices s = planner_.slices(c);
            const ChunkRange chunk{.first_unit = u32(c.u0), .first_row = u32(c.r0), .rows = u32(c.rows)};
            const std::uint32_t o_split_stride = u32(c.units * c.rows * p.Dv), lse_split_stride = u32(c.units * c.rows);

            const Slice o_part = whole(planner_.partial_o_bytes(c, keys));
            const Slice lse_part = whole(planner_.partial_lse_bytes(c, keys));
            for (std::uint32_t binding = 0; binding < keys.bindings(); ++binding) {
                const KeySlices k = planner_.key_slices(c, keys.keys(binding, p.Nkv));
                FlashParams params{.shape = attention_shape(p),
                                   .chunk = chunk,
                                   .mask = mask_params(p),
                                   .scale = static_cast<float>(p.scale),
                                   .keys_per_split = u32(keys.keys_per_split),
                                   .first_split = keys.first_split(binding),
                                   .o_split_stride = o_split_stride,
                                   .lse_split_stride = lse_split_stride,
                                   .q = s.q.desc,
                                   .k = k.k.desc,
                                   .v = k.v.desc,
                                   .o = split ? chunk_local(c, p, p.Dv) : s.o.desc,
                                   .lse = split ? chunk_local(c, p, 1) : s.lse.desc,
                                   .varlen = varlen(p)};
                params.mask.bool_mask = k.masks.bool_mask.desc;
                params.mask.float_mask = k.masks.float_mask.desc;
                Dispatch main{.kernel = &flash};
                if (paged) {
                    params.k = paged->k;
                    params.v = paged->v;
                    params.paged = paged->addressing;
                    bind_pools(main, d, *paged);
                } else {
                    main.bindings = {bind(2, *d.k, k.k, config_.view(p.k_dtype)),
                                     bind(3, *d.v, k.v, config_.view(p.v_dtype))};
                }
                main.bindings.insert(main.bindings.end(), {bind(1, *d.q, s.q, config_.view(p.dtype)),
                                 split ? bind(4, *o_partial, o_part) : bind(4, *d.o, s.o),
                                 split ? bind(5, *lse_partial, lse_part) : bind(5, *d.lse, s.lse),
                                 bind(6, *d.lengths, d.lengths_slice), bind(7, *d.bool_mask, k.masks.bool_mask),
                                 bind(8, *d.float_mask, k.masks.float_mask),
                                 bind(9, *d.head_terms, whole(d.head_terms_bytes)), bind(17, *d.cu_q, d.cu_q_slice),
                                 bind(18, *d.cu_k, d.cu_k_slice)});
                main.groups = {u32((c.rows + config_.rows_per_workgroup() - 1) / config_.rows_per_workgroup()),
                               u32(c.units), keys.splits_in(binding)};
                for (std::uint32_t pass = 0; pass < config_.column_passes; ++pass) {
                    params.first_column = pass * config_.columns_per_pass();
                    main.params = params;
                    r.dispatch(main);
                }
            }
            r.barrier();
            if (!split) continue;

            Dispatch merge{.kernel = combine,
                           .params = CombineParams{.shape = attention_shape(p),
                                                   .chunk = chunk,
                                                   .splits = std::max(1u, keys.splits),
                                                   .o_split_stride = o_split_stride,
                                                   .lse_split_stride = lse_split_stride,
                                                   .has_sinks = p.sinks.empty() ? 0u : 1u,
                                                   .partial_o = chunk_local(c, p, p.Dv),
                                                   .partial_lse = chunk_local(c, p, 1),
                                                   .o = s.o.desc,
                                                   .lse = s.lse.desc,
                                                   .varlen = varlen(p)}};
            merge.bindings = {bind(1, *o_partial, o_part), bind(2, *lse_partial, lse_part), bind(3, *d.o, s.o),
                              bind(4, *d.lse, s.lse), bind(5, *d.head_terms, whole(d.head_terms_bytes)),
                              bind(6, *d.cu_q, d.cu_q_slice), bind(7, *d.cu_k, d.cu_k_slice)};
            merge.groups = {u32(c.rows), u32(c.units), 1};
            r.dispatch(merge);
            r.barrier();
        }
    }

private:
    // K's pools at bindings 2 and 10-12, V's at 3 and 13-15 (the first pool again where the
    // kernel declares more than there are), the block table at 16.
    void bind_pools(Dispatch& dispatch, const DeviceBuffers& d, const PagedOperands& paged) const {
        for (std::uint32_t i = 0; i < kMaxPagedPools; ++i) {
            const std::uint32_t pool = i < paged.pools ? i : 0;
            const Slice k{d.k_pool_offsets[pool], whole(paged.k_pool_bytes).range, {}};
            const Slice v{d.v_pool_offsets[pool], whole(paged.v_pool_bytes).range, {}};
            dispatch.bindings.push_back(bind(i == 0 ? 2 : 9 + i, *d.k_pools[pool], clamp_to(k, *d.k_pools[pool]),
                                              config_.view(p_.k_dtype)));
            dispatch.bindings.push_back(bind(i == 0 ? 3 : 12 + i, *d.v_pools[pool], clamp_to(v, *d.v_pools[pool]),
                                              config_.view(p_.v_dtype)));
        }
        dispatch.bindings.push_back(bind(16, *d.block_table, d.table_slice));
    }
    // Whether flash_decode.comp may load K's and V's plain-type chunks as single uvec4s: every row
    // on 16 bytes (a dense binding starts on binding_alignment's ≥ 16, so its rows' element offsets
    // decide; a paged pool starts where its tensor does).
    bool wide_loads(const DeviceBuffers& d) const {
        const Problem& p = p_;
        if (const auto& paged = planner_.paged()) {
            for (std::uint32_t i = 0; i < paged->pools; ++i)
                if (!decode_wide_pool(paged->k, paged->addressing, p.k_dtype, d.k_pool_offsets[i]) ||
                    !decode_wide_pool(paged->v, paged->addressing, p.v_dtype, d.v_pool_offsets[i]))
                    return false;
            return true;
        }
        return wide_dense_;
    }

    // A slice cut at its buffer's end (a pool's range rounded up may pass it).
    static Slice clamp_to(Slice slice, const vk::Buffer& buffer) {
        slice.range = std::min(slice.range, buffer.size() - slice.offset);
        return slice;
    }

    // The split partials (one chunk's at a time: chunks run in order and reuse them).
    std::pair<std::uint64_t, std::uint64_t> partial_bytes() const {
        std::uint64_t partial_o = 16, partial_lse = 16;
        if (plan_.keys.split_mode())
            for (const auto& c : plan_.chunks) {
                partial_o = std::max(partial_o, planner_.partial_o_bytes(c, plan_.keys));
                partial_lse = std::max(partial_lse, planner_.partial_lse_bytes(c, plan_.keys));
            }
        return {partial_o, partial_lse};
    }

    Runtime& runtime_;
    const Problem& p_;
    FusedConfig config_;
    FusedPlanner planner_;
    FusedPlanner::Plan plan_;
    bool wide_dense_ = false;  // decode: every dense K and V row on 16 bytes (wide_loads)
};

}  // namespace

std::unique_ptr<PathRun> plan_fused(Runtime& runtime, const Problem& p, const Operands& operands,
                                    const FusedConfig& config, std::uint32_t splits) {
    return std::make_unique<FusedRun>(runtime, p, operands, config, splits);
}

}  // namespace vkattn::detail

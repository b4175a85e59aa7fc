#include "attention/fused.hpp"
#include "attention/fused_planner.hpp"

#include <algorithm>

#include "attention/dispatch.hpp"
#include "attention/io.hpp"
#include "attention/kernels.hpp"
#include "attention/path.hpp"
#include "attention/slicing.hpp"
#include "attention/workgroup_matrices.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"
#include "tensor/storage_rules.hpp"

namespace vkattn::detail {
namespace {

// A chunk-local dense [units][rows][width] scratch, addressed like a [B, Hq, Nq, width] tensor
// from the chunk's first (b, h, i): (u − u0)·rows·width + (ρ − r0)·width.
TensorDesc chunk_local(const Chunk& c, const Problem& p, std::int64_t width) {
    TensorDesc d;
    d.stride = {u32(p.Hq * p.Nq * width), u32(p.Nq * width), u32(width), 1};
    d.origin = {u32(c.u0 / p.Hkv), u32((c.u0 % p.Hkv) * p.group + c.r0 / p.Nq), u32(c.r0 % p.Nq), 0};
    return d;
}

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
        // The workgroup-matrix kernel reads dense K and V by tensor loads, every tile on 16 bytes, unless
        // it stages them (paged caches, other types, strides off 16 bytes: choose_workgroup_matrices).
        const bool workgroup = config.coopmat && config.coopmat->workgroup_matrices;
        const bool tensor_loads = workgroup && !config.coopmat->staged;
        if (tensor_loads && operands.paged) throw Error("internal: flash_cm2.comp reads a paged cache staged only.");
        // The decode kernel's loads of every type, and the cooperative-matrix kernel's of K/V stored as
        // its operands (its 16-byte chunks are 8 f16 or bf16 elements, copied as they lie) where its
        // layout allows (CoopmatLayout::staged_ahead), come as single uvec4s where every row allows;
        // the latter then settles its staging (CoopmatLayout::ahead_with).
        const bool coopmat_as_stored =
            config.coopmat && !workgroup && p.k_dtype == config.coopmat->operands && p.v_dtype == config.coopmat->operands;
        const bool wide_candidate = (config.decode || coopmat_as_stored) && !operands.paged;
        if (tensor_loads || wide_candidate) {
            // Every binding's rows start where the whole tensor's do, modulo the chunk (slices begin
            // on ≥ 16-byte boundaries): the first chunk's slices decide for all.
            const KeySlices k = planner_.key_slices(plan_.chunks.front(), keys.keys(0, p.Nkv));
            if (tensor_loads) {  // the strides allow them (choose_workgroup_matrices); the first elements must too
                require_tensor_loads_aligned(k.k.desc, p.Dk, "K");
                require_tensor_loads_aligned(k.v.desc, p.Dv, "V");
            } else {
                wide_dense_ = decode_wide_rows(k.k.desc, p.k_dtype, p.Dk) && decode_wide_rows(k.v.desc, p.v_dtype, p.Dv) &&
                              (!config.coopmat || config.coopmat->staged_ahead());
            }
        }
        if (config_.coopmat && !workgroup) config_.coopmat->ahead = config_.coopmat->ahead_with(wide_dense_);
        report.path = splits > 0 ? Impl::split : Impl::fused;
        report.variant = config_.describe();
        report.product_type = config.coopmat ? config.coopmat->operands : DType::f32;
        if (keys.split_mode())
            report.variant += " splits=" + std::to_string(keys.splits) + " keys/split=" + std::to_string(keys.keys_per_split);
        if (keys.bindings() > 1) report.variant += " key-slices=" + std::to_string(keys.bindings());
        if (wide_candidate) report.variant += wide_dense_ ? " loads=16B" : " loads=words";
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
        // The operand types are named first: a temporary among the arguments of a function that returns
        // a reference is what GCC 14's -Wdangling-reference warns of.
        const auto types = operand_types(p);
        const vk::Kernel& flash =
            config_.decode ? flash_decode_kernel(runtime_, config_, types, wide_loads(d), pools)
            : config_.tile    ? flash_tile_kernel(runtime_, config_, types, split, pools)
            : config_.coopmat ? flash_coopmat_kernel(runtime_, config_, types, split, pools, wide_dense_)
                              : flash_kernel(runtime_, config_, types, split, pools);
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
    bool wide_dense_ = false;  // decode, coopmat (K/V as its operands): every dense K and V row on 16 bytes (wide_loads)
};

}  // namespace

std::unique_ptr<PathRun> plan_fused(Runtime& runtime, const Problem& p, const Operands& operands,
                                    const FusedConfig& config, std::uint32_t splits) {
    return std::make_unique<FusedRun>(runtime, p, operands, config, splits);
}

}  // namespace vkattn::detail

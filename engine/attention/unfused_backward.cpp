// The three-stage backward (docs/design/TRAINING.md): for each block of units and query rows, and
// each query head g of the units' groups,
//   S  = scale·Q·Kᵀ,  dP = dO·Vᵀ                       bmm.comp, A·Bᵀ, into fp32 scratch
//   P̃, dS in place                                   bwd_scores.comp (the mask model, dropout, softcap)
//   dQ = scale·dS·K                                    bmm.comp, A·B, straight into dq
//   dV += P̃ᵀ·dO,  dK += scale·dSᵀ·Q                   bmm.comp, Aᵀ·B
// The products work on units b·Hkv + hk: query-side tensors are seen through head g of the group
// (their head stride times the group). dK and dV add their contributions (query heads and row
// blocks) in order through an fp32 sum, the last one stored in their own type: deterministic.
// The scores live in [units][rows][Nkv padded to 4] scratch, P's O(N²) memory, as the unfused
// forward's; the fused kernels check this path and it them.
#include <algorithm>
#include <string>

#include "attention/backward.hpp"
#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"
#include "types/narrow.hpp"

namespace vkattn::detail {
namespace {

std::int64_t padded_keys(const Problem& p) { return (p.Nkv + 3) / 4 * 4; }

// A query-side tensor's view as units (b, hk): head hk·group + g.
TensorDesc query_head(TensorDesc d, std::int64_t group, std::int64_t g) {
    d.origin[3] += u32(g) * d.stride[1];
    d.origin[1] /= u32(group);  // the slice starts on a group (whole units)
    d.stride[1] *= u32(group);
    return d;
}

// The tensor from row r0 as row 0 (what bmm.comp's transposed-A products index B by).
TensorDesc from_row(TensorDesc d, std::int64_t r0) {
    d.origin[3] += (u32(r0) - d.origin[2]) * d.stride[2];
    d.origin[2] = 0;
    return d;
}

// A scratch tensor of `rows` rows of `width` floats per unit, for units from `first_unit` on; row
// `first_row` (absolute) is its row 0. Indices wrap modulo 2³² to land in the buffer.
TensorDesc scratch_desc(const Problem& p, std::int64_t first_unit, std::int64_t rows, std::int64_t width,
                        std::int64_t first_row) {
    TensorDesc d;
    d.stride = {u32(p.Hkv * rows * width), u32(rows * width), u32(width), 1};
    d.origin = {0, 0, u32(first_row), u32(-first_unit * rows * width)};
    return d;
}

}  // namespace

void BackwardRun::plan_unfused(const vk::DeviceCaps& caps, std::uint64_t binding_limit) {
    const Problem& p = p_;
    const UnfusedBackwardConfig& config = choice_.unfused;
    // Each of S and dP in one binding (through a texel view when the products read texels), and the
    // two within a quarter of the device's memory.
    std::uint64_t budget = std::min<std::uint64_t>(binding_limit, runtime_.device_memory_bytes() / 8);
    if (config.texel) budget = std::min<std::uint64_t>(budget, caps.max_texel_buffer_elements * 16);
    const std::uint64_t row_bytes = static_cast<std::uint64_t>(padded_keys(p)) * 4;
    const std::int64_t inner = unfused_backward_inner_limit(caps);
    if (inner > 0 && p.Nkv > inner)
        throw ResourceLimit("k: " + std::to_string(p.Nkv) + " keys pass the " + std::to_string(inner) +
                            " that the unfused backward's dQ product may loop over on this device (its shader loops "
                            "stop after " + std::to_string(caps.max_loop_iterations) + " iterations).");
    if (row_bytes > budget)
        throw ResourceLimit("k: one row of the unfused backward's scores (" + std::to_string(p.Nkv) +
                            " keys) passes its limit of " + std::to_string(budget) + " bytes.");
    // The grids over the keys: S's and dP's columns, dK's and dV's rows.
    const std::int64_t key_columns = (p.Nkv + config.scores.block_cols() - 1) / config.scores.block_cols();
    const std::int64_t key_rows = (p.Nkv + config.dkv.block_rows() - 1) / config.dkv.block_rows();
    if (key_columns > caps.max_workgroup_count[0] || key_rows > caps.max_workgroup_count[1])
        throw ResourceLimit("k: " + std::to_string(p.Nkv) + " keys need a grid of " +
                            std::to_string(std::max(key_columns, key_rows)) + " workgroups in the unfused backward; "
                            "the device allows " + std::to_string(caps.max_workgroup_count[0]) + " along x and " +
                            std::to_string(caps.max_workgroup_count[1]) + " along y.");
    std::int64_t most_rows = std::min<std::int64_t>({p.Nq, static_cast<std::int64_t>(budget / row_bytes), 65535,
                                                    caps.max_workgroup_count[1]});
    if (inner > 0) most_rows = std::min(most_rows, inner);
    block_rows_ = most_rows;
    std::int64_t most_units = std::min<std::int64_t>({caps.max_workgroup_count[2], 65535, p.B * p.Hkv});
    if (block_rows_ == p.Nq)
        most_units = std::min<std::int64_t>(most_units, static_cast<std::int64_t>(budget / (row_bytes * p.Nq)));
    else
        most_units = 1;  // a unit's rows alone take several blocks
    sums_kv_ = p.group > 1 || block_rows_ < p.Nq;
    // dK's and dV's fp32 sums, per unit of the block, each in one binding.
    const std::uint64_t sum_row_bytes = static_cast<std::uint64_t>(p.Nkv * std::max(p.Dk, p.Dv)) * 4;
    if (sums_kv_ && sum_row_bytes > binding_limit)
        throw ResourceLimit("k: the unfused backward sums one head's dK and dV in fp32 (" + std::to_string(sum_row_bytes) +
                            " bytes), past the device's binding limit of " + std::to_string(binding_limit) + " bytes.");
    if (sums_kv_) most_units = std::min<std::int64_t>(most_units, static_cast<std::int64_t>(binding_limit / sum_row_bytes));
    block_units_ = std::max<std::int64_t>(1, most_units);

    // Every pipeline it records, so that recording only records.
    const OperandTypes t = operand_types(p);
    bwd_scores_kernel(runtime_);
    bmm_kernel(runtime_, config.scores, BmmForm::a_bt, t.q, t.k, DType::f32);
    bmm_kernel(runtime_, config.scores, BmmForm::a_bt, t.q, t.v, DType::f32);
    bmm_kernel(runtime_, config.dq, BmmForm::a_b, DType::f32, t.k, t.q);
    for (const DType out : {t.k, t.v}) {
        bmm_kernel(runtime_, config.dkv, BmmForm::at_b, DType::f32, t.q, out, sums_kv_ ? BmmAdd::residual : BmmAdd::none);
        if (sums_kv_) {
            bmm_kernel(runtime_, config.dkv, BmmForm::at_b, DType::f32, t.q, DType::f32, BmmAdd::none);
            bmm_kernel(runtime_, config.dkv, BmmForm::at_b, DType::f32, t.q, DType::f32, BmmAdd::residual);
        }
    }
}

std::uint64_t BackwardRun::scores_bytes() const {
    if (choice_.path != Impl::unfused) return 16;
    return static_cast<std::uint64_t>(block_units_ * block_rows_ * padded_keys(p_)) * 4;
}

std::uint64_t BackwardRun::sum_bytes(std::int64_t features) const {
    if (choice_.path != Impl::unfused || !sums_kv_) return 16;
    return static_cast<std::uint64_t>(block_units_ * p_.Nkv * features) * 4;
}

void BackwardRun::record_unfused(Program& program, const BackwardBuffers& b, const BackwardChunk& c,
                                 const vk::Buffer& delta, const vk::Buffer& scores, const vk::Buffer& grad_scores,
                                 const vk::Buffer& dk_sum, const vk::Buffer& dv_sum) const {
    const Problem& p = p_;
    const DeviceBuffers& f = b.forward;
    const UnfusedBackwardConfig& config = choice_.unfused;
    const OperandTypes t = operand_types(p);
    const std::int64_t G = p.group, keys4 = padded_keys(p);
    // A product over units [first, first + units): C = alpha·op(A)·op(B) (+ R), rows [r0, r0 + rows) of C.
    struct Term {
        Binding binding;
        DType type;
        TensorDesc desc;
    };
    auto product = [&](const BmmConfig& bmm, BmmForm form, std::int64_t first, std::int64_t units, std::int64_t r0,
                       std::int64_t rows, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, Term a,
                       Term bb, Term cc, const Term* residual) {
        BmmParams params{.chunk = {.first_unit = u32(first), .first_row = u32(r0), .rows = u32(rows)},
                         .M = u32(M), .N = u32(N), .K = u32(K), .alpha = alpha, .heads = u32(p.Hkv), .group = 1};
        params.a = a.desc;
        params.b = bb.desc;
        params.c = cc.desc;
        a.binding.binding = 1;
        bb.binding.binding = 2;
        cc.binding.binding = 3;
        // Binding 4 is read only as the residual; binding 5 (an fp8 B's scales) never: B stands in.
        Binding addend = residual ? residual->binding : bb.binding, b_scales = bb.binding;
        addend.binding = 4;
        b_scales.binding = 5;
        if (residual) params.residual = residual->desc;
        Dispatch d{.kernel = &bmm_kernel(runtime_, bmm, form, a.type, bb.type, cc.type,
                                         residual ? BmmAdd::residual : BmmAdd::none),
                   .params = params};
        d.bindings = {a.binding, bb.binding, cc.binding, addend, b_scales};
        d.groups = {u32((N + bmm.block_cols() - 1) / bmm.block_cols()), u32((rows + bmm.block_rows() - 1) / bmm.block_rows()),
                    u32(units)};
        program.dispatch(d);
    };
    auto texel_view = [&](DType type) { return config.texel ? float_view(type) : TexelView::rgba32f; };
    auto binding = [](const vk::Buffer* buffer, const Slice& slice, TexelView view) {
        return Binding{0, buffer, slice.offset, slice.range, view};
    };
    const Binding q = binding(f.q, c.q, texel_view(t.q)), k = binding(f.k, c.k, texel_view(t.k)),
                  v = binding(f.v, c.v, texel_view(t.v)), dout = binding(b.grad_out, c.grad_out, texel_view(t.q));
    // The scratch bound at the sizes planned (the buffers are padded past them).
    const Binding s_all = binding(&scores, whole(scores_bytes()), TexelView::rgba32f),
                  ds_all = binding(&grad_scores, whole(scores_bytes()), TexelView::rgba32f);
    const float scale = static_cast<float>(p.scale);

    for (std::int64_t first = c.u0; first < c.u0 + c.units; first += block_units_) {
        const std::int64_t units = std::min(block_units_, c.u0 + c.units - first);
        const std::int64_t contributions = G * ((p.Nq + block_rows_ - 1) / block_rows_);
        std::int64_t contribution = 0;
        for (std::int64_t r0 = 0; r0 < p.Nq; r0 += block_rows_) {
            const std::int64_t rows = std::min(block_rows_, p.Nq - r0);
            const TensorDesc scratch = scratch_desc(p, first, block_rows_, keys4, r0);
            TensorDesc local = scratch;  // the block's rows from 0, as the transposed products read A
            local.origin[2] = 0;
            for (std::int64_t g = 0; g < G; ++g, ++contribution) {
                const TensorDesc qd = query_head(c.q.desc, G, g), god = query_head(c.grad_out.desc, G, g);
                // 1. S = scale·Q·Kᵀ and dP = dO·Vᵀ.
                product(config.scores, BmmForm::a_bt, first, units, r0, rows, p.Nq, p.Nkv, p.Dk, scale, {q, t.q, qd},
                        {k, t.k, c.k.desc}, {s_all, DType::f32, scratch}, nullptr);
                product(config.scores, BmmForm::a_bt, first, units, r0, rows, p.Nq, p.Nkv, p.Dv, 1.0f, {dout, t.q, god},
                        {v, t.v, c.v.desc}, {ds_all, DType::f32, scratch}, nullptr);
                program.barrier();
                // 2. P̃ and dS in place.
                BackwardParams bp{.shape = attention_shape(p), .mask = mask_params(p), .scale = scale,
                                  .first_unit = u32(first), .lse = c.lse.desc, .delta = c.delta.desc};
                bp.mask.bool_mask = c.masks.bool_mask.desc;
                bp.mask.float_mask = c.masks.float_mask.desc;
                bp.scores = scratch;
                bp.scores_work = {u32(g), u32(r0), 0, u32(keys4)};
                Dispatch middle{.kernel = &bwd_scores_kernel(runtime_), .params = bp};
                middle.bindings = {bind(5, *f.lse, c.lse), bind(6, *f.lengths, f.lengths_slice),
                                   bind(7, *f.bool_mask, c.masks.bool_mask), bind(8, *f.float_mask, c.masks.float_mask),
                                   bind(9, *f.head_terms, whole(f.head_terms_bytes)), bind(11, delta, c.delta),
                                   bind(13, scores, whole(scores_bytes())), bind(14, grad_scores, whole(scores_bytes()))};
                middle.groups = {u32((keys4 / 4 + 63) / 64), u32(rows), u32(units)};
                program.dispatch(middle);
                program.barrier();
                // 3. dQ = scale·dS·K, straight into dq.
                if (b.dq != nullptr)
                    product(config.dq, BmmForm::a_b, first, units, r0, rows, p.Nq, p.Dk, p.Nkv, scale,
                            {ds_all, DType::f32, scratch}, {k, t.k, c.k.desc},
                            {binding(b.dq, c.dq, TexelView::rgba32f), t.q, query_head(c.dq.desc, G, g)}, nullptr);
                // dV (+)= P̃ᵀ·dO and dK (+)= scale·dSᵀ·Q: the first contribution starts the fp32 sum,
                // the last adds it and stores the gradient in its type.
                if (b.dk != nullptr)
                    for (const bool is_v : {true, false}) {
                        const std::int64_t D = is_v ? p.Dv : p.Dk;
                        const vk::Buffer& sum_buffer = is_v ? dv_sum : dk_sum;
                        const Term sum{binding(&sum_buffer, whole(sum_bytes(D)), TexelView::rgba32f), DType::f32,
                                          scratch_desc(p, first, p.Nkv, D, 0)};
                        const Slice& out = is_v ? c.dv : c.dk;
                        const Term gradient{binding(is_v ? b.dv : b.dk, out, TexelView::rgba32f), is_v ? t.v : t.k,
                                               out.desc};
                        const bool stores = !sums_kv_ || contribution + 1 == contributions;
                        const bool adds = sums_kv_ && contribution > 0;
                        product(config.dkv, BmmForm::at_b, first, units, 0, p.Nkv, p.Nkv, D, rows, is_v ? 1.0f : scale,
                                {is_v ? s_all : ds_all, DType::f32, local},
                                {is_v ? dout : q, t.q, from_row(is_v ? god : qd, r0)}, stores ? gradient : sum,
                                adds ? &sum : nullptr);
                    }
                program.barrier();
            }
        }
    }
}

}  // namespace vkattn::detail

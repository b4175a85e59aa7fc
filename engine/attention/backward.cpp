#include "attention/backward.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>

#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "attention/workgroup_matrices.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"
#include "types/narrow.hpp"

namespace vkattn::detail {
namespace {

Operand delta_operand(const Problem& p) { return {{p.Hq * p.Nq, p.Nq, 1, 0}, 0, backward_scratch_bytes(p)}; }

}  // namespace

std::uint64_t backward_scratch_bytes(const Problem& p) {
    return allocated_bytes(static_cast<std::uint64_t>(p.B * p.Hq * p.Nq) * 4);
}

TexelView BackwardRun::view(DType t) const {
    return choice_.path == Impl::fused ? choice_.fused.view(t) : float_view(t);
}

BackwardRun::BackwardRun(Runtime& runtime, const Problem& p, const BackwardChoice& choice, const BackwardOperands& ops)
    : runtime_(runtime), p_(p), choice_(choice) {
    const bool fused = choice.path == Impl::fused;
    const bool texel = fused ? choice.fused.texel : choice.unfused.texel;
    const vk::DeviceCaps& caps = runtime.device().caps();
    const std::uint64_t align = binding_alignment(caps), limit = runtime.max_binding_bytes();
    // The bindings of units [u0, u0 + units), or the first tensor that passes its limit (texel views
    // limit their element count too).
    const char* culprit = nullptr;
    // `rows_only`: lse and Δ alone (what the sinks' kernel binds).
    auto chunk = [&](std::int64_t u0, std::int64_t units, bool rows_only = false) -> std::optional<BackwardChunk> {
        const std::int64_t last = u0 + units - 1;
        Box queries{u0 / p.Hkv, last / p.Hkv, 0, p.Hq - 1, 0, p.Nq - 1}, keys{queries.b0, queries.b1, 0, p.Hkv - 1, 0, p.Nkv - 1};
        if (queries.b0 == queries.b1) {  // one batch: its units' heads only
            keys.h0 = u0 % p.Hkv;
            keys.h1 = last % p.Hkv;
            queries.h0 = keys.h0 * p.group;
            queries.h1 = keys.h1 * p.group + p.group - 1;
        }
        BackwardChunk c{.u0 = u0, .units = units};
        auto fits = [&](Slice& out, const Operand& op, std::int64_t row, const Box& box, DType dtype, const char* name,
                        bool view_texel) {
            out = op.slice(row, box, unit_of(dtype), align);
            std::uint64_t most = limit;
            if (texel && view_texel)
                most = std::min<std::uint64_t>(most, caps.max_texel_buffer_elements * view_bytes(view(dtype)));
            if (out.range > most) culprit = name;
            return out.range <= most;
        };
        if (rows_only)
            return fits(c.lse, ops.forward.lse, 1, queries, DType::f32, "lse", false) &&
                           fits(c.delta, delta_operand(p), 1, queries, DType::f32, "the row terms Δ", false)
                       ? std::optional(c)
                       : std::nullopt;
        const bool ok = fits(c.q, ops.forward.q, p.Dk, queries, p.dtype, "q", true) &&
                        fits(c.k, ops.forward.k, p.Dk, keys, p.k_dtype, "k", true) &&
                        fits(c.v, ops.forward.v, p.Dv, keys, p.v_dtype, "v", true) &&
                        fits(c.o, ops.forward.o, p.Dv, queries, p.dtype, "o", false) &&
                        fits(c.lse, ops.forward.lse, 1, queries, DType::f32, "lse", false) &&
                        fits(c.grad_out, ops.grad_out, p.Dv, queries, p.dtype, "grad_out", true) &&
                        fits(c.delta, delta_operand(p), 1, queries, DType::f32, "the row terms Δ", false) &&
                        fits(c.dq, ops.dq, p.Dk, queries, p.dtype, "dq", false) &&
                        fits(c.dk, ops.dk, p.Dk, keys, p.k_dtype, "dk", false) &&
                        fits(c.dv, ops.dv, p.Dv, keys, p.v_dtype, "dv", false);
        if (!ok) return std::nullopt;
        c.masks = mask_slices(p, ops.forward, queries, align);
        for (const auto& [m, name] : {std::pair{&c.masks.bool_mask, "bool_mask"}, std::pair{&c.masks.float_mask, "float_mask"}})
            if (m->range > limit) {
                culprit = name;
                return std::nullopt;
            }
        return c;
    };
    // As many whole units per chunk as fit (and the grid takes), halving until they do.
    const std::int64_t all = p.B * p.Hkv;
    for (std::int64_t per = std::min<std::int64_t>(all, caps.max_workgroup_count[1]);; per = (per + 1) / 2) {
        chunks_.clear();
        bool fitted = true;
        for (std::int64_t u0 = 0; u0 < all && fitted; u0 += per) {
            auto c = chunk(u0, std::min(per, all - u0));
            if (c) chunks_.push_back(*c);
            else fitted = false;
        }
        if (fitted) break;
        if (per == 1)
            throw ResourceLimit(std::string(culprit) + ": one batch and K/V head's share passes the device's binding limit of " +
                                std::to_string(limit) + " bytes; the backward pass cuts its work by heads only.");
    }
    // The sinks' and the mask's kernels sum over every unit: they bind what they read whole.
    if (ops.d_sinks || ops.d_float_mask) {
        whole_ = chunks_.size() == 1 ? std::optional(chunks_.front()) : chunk(0, all, !ops.d_float_mask);
        if (!whole_)
            throw ResourceLimit(std::string(culprit) + ": the " + (ops.d_float_mask ? "float mask's" : "sinks'") +
                                " gradient binds it whole, past the device's binding limit of " + std::to_string(limit) +
                                " bytes.");
    }

    if (fused) {
        const BackwardConfig& config = choice.fused;
        if (const std::string why = backward_fused_misfit(caps, config, p); !why.empty()) throw ResourceLimit(why);
        if (config.coopmat && config.coopmat->workgroup_matrices) {
            // Tensor loads start every tile on 16 bytes: the first chunk's descriptors decide for
            // all (chunks split by whole units, their bindings on the device's offset alignment).
            const BackwardChunk& c = chunks_.front();
            for (const auto& [slice, width, name] : {std::tuple{&c.q, p.Dk, "Q"}, std::tuple{&c.k, p.Dk, "K"}, std::tuple{&c.v, p.Dv, "V"},
                                                     std::tuple{&c.grad_out, p.Dv, "dO"}})
                require_tensor_loads_aligned(slice->desc, width, name);
        }
        report.variant = config.describe();
        report.product_type = config.coopmat ? config.coopmat->operands : DType::f32;
        bwd_q_kernel(runtime, config, operand_types(p));
        bwd_kv_kernel(runtime, config, operand_types(p));
    } else {
        plan_unfused(caps, limit);
        report.variant = choice.unfused.describe();
    }

    report.path = choice.path;
    if (chunks_.size() > 1) report.variant += " chunks=" + std::to_string(chunks_.size());
    report.slices = static_cast<std::uint32_t>(chunks_.size());
    report.flops = p.visible_pairs() * 2.0 * static_cast<double>(3 * p.Dk + 2 * p.Dv);
    // The pipelines now, so that recording only records.
    bwd_delta_kernel(runtime, p.dtype);
    if (!p.sinks.empty()) bwd_sinks_kernel(runtime);
}

void BackwardRun::record(Program& program, const BackwardBuffers& b) const {
    const Problem& p = p_;
    const DeviceBuffers& f = b.forward;
    const vk::Buffer& delta = program.scratch(backward_scratch_bytes(p), "the row terms Δ");
    auto params_of = [&](const BackwardChunk& c) {
        BackwardParams params{.shape = attention_shape(p),
                              .mask = mask_params(p),
                              .scale = static_cast<float>(p.scale),
                              .rows = u32(c.units * p.group * p.Nq),
                              .first_unit = u32(c.u0),
                              .q = c.q.desc,
                              .k = c.k.desc,
                              .v = c.v.desc,
                              .o = c.o.desc,
                              .grad_out = c.grad_out.desc,
                              .lse = c.lse.desc,
                              .delta = c.delta.desc,
                              .dq = c.dq.desc,
                              .dk = c.dk.desc,
                              .dv = c.dv.desc};
        params.mask.bool_mask = c.masks.bool_mask.desc;
        params.mask.float_mask = c.masks.float_mask.desc;
        return params;
    };
    // The bindings every kernel over q, k, v and dO shares (each kernel adds its outputs).
    auto inputs = [&](const BackwardChunk& c) {
        return std::vector<Binding>{bind(1, *f.q, c.q, view(p.dtype)),
                                    bind(2, *f.k, c.k, view(p.k_dtype)),
                                    bind(3, *f.v, c.v, view(p.v_dtype)),
                                    bind(5, *f.lse, c.lse),
                                    bind(6, *f.lengths, f.lengths_slice),
                                    bind(7, *f.bool_mask, c.masks.bool_mask),
                                    bind(8, *f.float_mask, c.masks.float_mask),
                                    bind(9, *f.head_terms, whole(f.head_terms_bytes)),
                                    bind(10, *b.grad_out, c.grad_out, view(p.dtype)),
                                    bind(11, delta, c.delta)};
    };

    // Δ, one invocation per row of each chunk, over grids of at most 65,535 columns.
    for (const BackwardChunk& c : chunks_) {
        const std::int64_t blocks = (c.units * p.group * p.Nq + 63) / 64;
        const std::int64_t columns = std::min<std::int64_t>(blocks, 65535);
        Dispatch rows{.kernel = &bwd_delta_kernel(runtime_, p.dtype), .params = params_of(c)};
        rows.bindings = {bind(1, *b.grad_out, c.grad_out), bind(2, *f.o, c.o), bind(3, delta, c.delta)};
        rows.groups = {u32(columns), u32((blocks + columns - 1) / columns), 1};
        program.dispatch(rows);
    }
    program.barrier();

    if (b.d_sinks != nullptr) {
        Dispatch sinks{.kernel = &bwd_sinks_kernel(runtime_), .params = params_of(*whole_)};
        sinks.bindings = {bind(1, *f.lse, whole_->lse), bind(2, delta, whole_->delta),
                          bind(3, *f.head_terms, whole(f.head_terms_bytes)),
                          bind(4, *b.d_sinks, Slice{b.d_sinks_offset, static_cast<std::uint64_t>(p.Hq) * 4, {}})};
        sinks.groups = {u32(p.Hq), 1, 1};
        program.dispatch(sinks);
    }

    if (b.d_float_mask != nullptr) {
        // One invocation per mask element; its broadcast terms summed over as many dispatches as
        // the loop budget needs, each adding to the last (mask_work), in order.
        std::array<std::uint32_t, 4> shape{};
        const std::array<std::int64_t, 4> full{p.B, p.Hq, p.Nq, p.Nkv};
        std::int64_t terms = 1;
        for (int d = 0; d < 4; ++d) {
            const bool broadcast = p.float_mask.strides[d] == 0 && full[d] > 1;
            shape[d] = u32(broadcast ? 1 : full[d]);
            if (broadcast) terms *= full[d];
        }
        const std::int64_t elements = p.float_mask.elements;
        const std::int64_t per_dispatch = backward_mask_terms_per_dispatch(runtime_.device().caps(), p);
        const std::int64_t step = per_dispatch > 0 ? per_dispatch : terms;
        const std::int64_t mask_blocks = (elements + 63) / 64, mask_columns = std::min<std::int64_t>(mask_blocks, 65535);
        Dispatch mask{.kernel = &bwd_mask_kernel(runtime_, operand_types(p))};
        mask.bindings = inputs(*whole_);
        mask.bindings.push_back(bind(4, *b.d_float_mask, Slice{b.d_float_mask_offset, static_cast<std::uint64_t>(elements) * 4, {}}));
        mask.groups = {u32(mask_columns), u32((mask_blocks + mask_columns - 1) / mask_columns), 1};
        for (std::int64_t first = 0; first < terms; first += step) {
            BackwardParams pp = params_of(*whole_);
            pp.mask_shape = shape;
            pp.mask_work = {u32(first), u32(std::min(step, terms - first)), u32(elements), 0};
            mask.params = pp;
            program.dispatch(mask);
            if (first + step < terms) program.barrier();  // the next dispatch adds to these sums
        }
    }

    if (choice_.path == Impl::unfused) {
        if (b.dq == nullptr && b.dk == nullptr) return;  // only the sinks' or the mask's gradient
        const vk::Buffer& scores = program.scratch(scores_bytes(), "the backward's scores S");
        const vk::Buffer& grad_scores = program.scratch(scores_bytes(), "the backward's score gradients dP");
        const vk::Buffer& dk_sum = program.scratch(sum_bytes(p.Dk), "the backward's dK sums");
        const vk::Buffer& dv_sum = program.scratch(sum_bytes(p.Dv), "the backward's dV sums");
        for (const BackwardChunk& c : chunks_) record_unfused(program, b, c, delta, scores, grad_scores, dk_sum, dv_sum);
        program.barrier();
        return;
    }
    // dQ and dK/dV, per chunk and column pass.
    for (const BackwardChunk& c : chunks_)
        for (std::uint32_t pass = 0; pass < choice_.fused.column_passes; ++pass) {
            BackwardParams pp = params_of(c);
            pp.first_column = pass * choice_.fused.columns_per_pass();
            if (b.dq != nullptr) {
                Dispatch dq{.kernel = &bwd_q_kernel(runtime_, choice_.fused, operand_types(p)), .params = pp, .bindings = inputs(c)};
                dq.bindings.push_back(bind(4, *b.dq, c.dq));
                dq.groups = {u32((p.group * p.Nq + choice_.fused.subgroups * choice_.fused.q_rows - 1) / (choice_.fused.subgroups * choice_.fused.q_rows)),
                             u32(c.units), 1};
                program.dispatch(dq);
            }
            if (b.dk != nullptr) {
                Dispatch dkv{.kernel = &bwd_kv_kernel(runtime_, choice_.fused, operand_types(p)), .params = pp, .bindings = inputs(c)};
                dkv.bindings.push_back(bind(4, *b.dk, c.dk));
                dkv.bindings.push_back(bind(12, *b.dv, c.dv));
                dkv.groups = {u32((p.Nkv + choice_.fused.subgroups * choice_.fused.kv_keys - 1) / (choice_.fused.subgroups * choice_.fused.kv_keys)),
                              u32(c.units), 1};
                program.dispatch(dkv);
            }
        }
    program.barrier();
}

}  // namespace vkattn::detail

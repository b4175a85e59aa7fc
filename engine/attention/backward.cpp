#include "attention/backward.hpp"

#include <algorithm>
#include <string>

#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }

std::uint64_t delta_bytes(const Problem& p) { return allocated_bytes(static_cast<std::uint64_t>(p.B * p.Hq * p.Nq) * 4); }
Operand delta_operand(const Problem& p) { return {{p.Hq * p.Nq, p.Nq, 1, 0}, 0, delta_bytes(p)}; }

}  // namespace

BackwardRun::BackwardRun(Runtime& runtime, const Problem& p, const BackwardConfig& config, const BackwardOperands& ops)
    : runtime_(runtime), p_(p), config_(config) {
    const vk::DeviceCaps& caps = runtime.device().caps();
    const std::uint64_t align = binding_alignment(caps), limit = runtime.max_binding_bytes();
    const Box queries{0, p.B - 1, 0, p.Hq - 1, 0, p.Nq - 1}, keys{0, p.B - 1, 0, p.Hkv - 1, 0, p.Nkv - 1};
    // `texel`: the operand is read through a texel view of that dtype, whose element count is limited too.
    auto slice = [&](const Operand& op, std::int64_t row, const Box& box, DType dtype, const char* name,
                     bool texel = false) {
        const Slice s = op.slice(row, box, unit_of(dtype), align);
        std::uint64_t most = limit;
        if (texel && config.texel) most = std::min<std::uint64_t>(most, caps.max_texel_buffer_elements * view_bytes(config.view(dtype)));
        if (s.range > most)
            throw ResourceLimit(std::string(name) + ": the backward pass binds each tensor whole, and its " +
                                std::to_string(s.range) + " bytes pass the device's binding limit of " +
                                std::to_string(most) + " bytes.");
        return s;
    };
    q_ = slice(ops.forward.q, p.Dk, queries, p.dtype, "q", true);
    k_ = slice(ops.forward.k, p.Dk, keys, p.k_dtype, "k", true);
    v_ = slice(ops.forward.v, p.Dv, keys, p.v_dtype, "v", true);
    o_ = slice(ops.forward.o, p.Dv, queries, p.dtype, "o");
    lse_ = slice(ops.forward.lse, 1, queries, DType::f32, "lse");
    grad_out_ = slice(ops.grad_out, p.Dv, queries, p.dtype, "grad_out", true);
    delta_ = slice(delta_operand(p), 1, queries, DType::f32, "the row terms Δ");
    dq_ = slice(ops.dq, p.Dk, queries, p.dtype, "dq");
    dk_ = slice(ops.dk, p.Dk, keys, p.k_dtype, "dk");
    dv_ = slice(ops.dv, p.Dv, keys, p.v_dtype, "dv");
    masks_ = mask_slices(p, ops.forward, queries, align);
    for (const auto& [s, name] : {std::pair{&masks_.bool_mask, "bool_mask"}, std::pair{&masks_.float_mask, "float_mask"}})
        if (s->range > limit)
            throw ResourceLimit(std::string(name) + ": the backward pass binds the mask whole, and its " +
                                std::to_string(s->range) + " bytes pass the device's binding limit of " +
                                std::to_string(limit) + " bytes.");

    const std::int64_t q_groups = (p.group * p.Nq + config.subgroups * config.q_rows - 1) / (config.subgroups * config.q_rows);
    const std::int64_t kv_groups = (p.Nkv + config.subgroups * config.kv_keys - 1) / (config.subgroups * config.kv_keys);
    if (std::max(q_groups, kv_groups) > caps.max_workgroup_count[0])
        throw ResourceLimit("q: the backward pass's grid of " + std::to_string(std::max(q_groups, kv_groups)) +
                            " row blocks passes the device's " + std::to_string(caps.max_workgroup_count[0]) + ".");
    if (const std::int64_t most = backward_keys_limit(caps, config, p); most > 0 && p.Nkv > most)
        throw ResourceLimit("k: " + std::to_string(p.Nkv) + " keys pass the " + std::to_string(most) +
                            " that one workgroup of the backward pass may visit on this device (its shader loops "
                            "stop after " + std::to_string(caps.max_loop_iterations) + " iterations).");
    if (const std::int64_t most = backward_queries_limit(caps, config, p); most > 0 && p.Nq > most)
        throw ResourceLimit("q: " + std::to_string(p.Nq) + " queries pass the " + std::to_string(most) +
                            " that one workgroup of the backward pass may visit on this device (its shader loops "
                            "stop after " + std::to_string(caps.max_loop_iterations) + " iterations).");

    report.path = Impl::fused;
    report.variant = config.describe();
    report.flops = p.visible_pairs() * 2.0 * static_cast<double>(3 * p.Dk + 2 * p.Dv);
    // The pipelines now, so that recording only records.
    bwd_delta_kernel(runtime, p.dtype);
    if (!p.sinks.empty()) bwd_sinks_kernel(runtime);
    bwd_q_kernel(runtime, config, operand_types(p));
    bwd_kv_kernel(runtime, config, operand_types(p));
}

std::uint64_t BackwardRun::scratch_bytes() const { return delta_bytes(p_); }

void BackwardRun::record(Program& program, const BackwardBuffers& b) const {
    const Problem& p = p_;
    const DeviceBuffers& f = b.forward;
    const vk::Buffer& delta = program.scratch(delta_bytes(p), "the row terms Δ");
    BackwardParams params{.shape = attention_shape(p),
                          .mask = mask_params(p),
                          .scale = static_cast<float>(p.scale),
                          .rows = u32(p.B * p.Hq * p.Nq),
                          .q = q_.desc,
                          .k = k_.desc,
                          .v = v_.desc,
                          .o = o_.desc,
                          .grad_out = grad_out_.desc,
                          .lse = lse_.desc,
                          .delta = delta_.desc,
                          .dq = dq_.desc,
                          .dk = dk_.desc,
                          .dv = dv_.desc};
    params.mask.bool_mask = masks_.bool_mask.desc;
    params.mask.float_mask = masks_.float_mask.desc;

    // Δ, one invocation per row, over a grid of at most 65,535 columns.
    const std::int64_t blocks = (p.B * p.Hq * p.Nq + 63) / 64;
    const std::int64_t columns = std::min<std::int64_t>(blocks, 65535);
    Dispatch rows{.kernel = &bwd_delta_kernel(runtime_, p.dtype), .params = params};
    rows.bindings = {bind(1, *b.grad_out, grad_out_), bind(2, *f.o, o_), bind(3, delta, delta_)};
    rows.groups = {u32(columns), u32((blocks + columns - 1) / columns), 1};
    program.dispatch(rows);
    program.barrier();

    if (b.d_sinks != nullptr) {
        Dispatch sinks{.kernel = &bwd_sinks_kernel(runtime_), .params = params};
        sinks.bindings = {bind(1, *f.lse, lse_), bind(2, delta, delta_), bind(3, *f.head_terms, whole(f.head_terms_bytes)),
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
        mask.bindings = {bind(1, *f.q, q_, config_.view(p.dtype)),
                         bind(2, *f.k, k_, config_.view(p.k_dtype)),
                         bind(3, *f.v, v_, config_.view(p.v_dtype)),
                         bind(4, *b.d_float_mask, Slice{b.d_float_mask_offset, static_cast<std::uint64_t>(elements) * 4, {}}),
                         bind(5, *f.lse, lse_),
                         bind(6, *f.lengths, f.lengths_slice),
                         bind(7, *f.bool_mask, masks_.bool_mask),
                         bind(8, *f.float_mask, masks_.float_mask),
                         bind(9, *f.head_terms, whole(f.head_terms_bytes)),
                         bind(10, *b.grad_out, grad_out_, config_.view(p.dtype)),
                         bind(11, delta, delta_)};
        mask.groups = {u32(mask_columns), u32((mask_blocks + mask_columns - 1) / mask_columns), 1};
        for (std::int64_t first = 0; first < terms; first += step) {
            BackwardParams pp = params;
            pp.mask_shape = shape;
            pp.mask_work = {u32(first), u32(std::min(step, terms - first)), u32(elements), 0};
            mask.params = pp;
            program.dispatch(mask);
            if (first + step < terms) program.barrier();  // the next dispatch adds to these sums
        }
    }

    const std::uint32_t max_units = runtime_.device().caps().max_workgroup_count[1];
    const std::int64_t units = p.B * p.Hkv;
    auto common = [&](Dispatch& d) {
        d.bindings = {bind(1, *f.q, q_, config_.view(p.dtype)),
                      bind(2, *f.k, k_, config_.view(p.k_dtype)),
                      bind(3, *f.v, v_, config_.view(p.v_dtype)),
                      bind(5, *f.lse, lse_),
                      bind(6, *f.lengths, f.lengths_slice),
                      bind(7, *f.bool_mask, masks_.bool_mask),
                      bind(8, *f.float_mask, masks_.float_mask),
                      bind(9, *f.head_terms, whole(f.head_terms_bytes)),
                      bind(10, *b.grad_out, grad_out_, config_.view(p.dtype)),
                      bind(11, delta, delta_)};
    };
    // Units in grid rows of at most the device's count; column passes for wide heads.
    auto run = [&](Dispatch d, std::int64_t row_blocks) {
        for (std::int64_t u0 = 0; u0 < units; u0 += max_units) {
            d.groups = {u32(row_blocks), u32(std::min<std::int64_t>(max_units, units - u0)), 1};
            for (std::uint32_t pass = 0; pass < config_.column_passes; ++pass) {
                BackwardParams pp = params;
                pp.first_unit = u32(u0);
                pp.first_column = pass * config_.columns_per_pass();
                d.params = pp;
                program.dispatch(d);
            }
        }
    };
    if (b.dq != nullptr) {
        Dispatch dq{.kernel = &bwd_q_kernel(runtime_, config_, operand_types(p))};
        common(dq);
        dq.bindings.push_back(bind(4, *b.dq, dq_));
        run(dq, (p.group * p.Nq + config_.subgroups * config_.q_rows - 1) / (config_.subgroups * config_.q_rows));
    }
    if (b.dk != nullptr) {
        Dispatch dkv{.kernel = &bwd_kv_kernel(runtime_, config_, operand_types(p))};
        common(dkv);
        dkv.bindings.push_back(bind(4, *b.dk, dk_));
        dkv.bindings.push_back(bind(12, *b.dv, dv_));
        run(dkv, (p.Nkv + config_.subgroups * config_.kv_keys - 1) / (config_.subgroups * config_.kv_keys));
    }
    program.barrier();
}

}  // namespace vkattn::detail

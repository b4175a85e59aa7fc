// vkattn::attention_backward on device tensors: the backward pass recorded into a batch over the
// caller's tensors (the forward's o and lse among them), each bound whole at its offset.
#include <array>
#include <memory>
#include <optional>
#include <string>

#include "attention/backward.hpp"
#include "attention/params.hpp"
#include "attention/path.hpp"
#include "plan/plan_state.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "submit/host_copy.hpp"
#include "tensor/storage.hpp"
#include "tune/table.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/plan.hpp"
#include "vkattn/variants.hpp"

namespace vkattn {
namespace detail {
namespace {

std::optional<TensorLayout> layout_if(const DeviceTensor& t) {
    if (!t.defined()) return std::nullopt;
    return TensorLayout{t.dtype(), t.shape(), t.strides()};
}

Operand operand_of(const DeviceTensor& t, const std::array<std::int64_t, 4>& strides) {
    return {strides, element_base(t), TensorAccess::storage(t)->buffer.size()};
}

// A small f32 constant buffer (the per-head terms) filled in the batch.
std::shared_ptr<Storage> constants(Runtime& runtime, BatchState& batch, const std::vector<float>& values) {
    auto storage = allocate_storage(runtime, values.size() * 4, "the per-head terms (ALiBi slopes, sinks)");
    const std::array<std::int64_t, 4> shape{1, 1, 1, static_cast<std::int64_t>(values.size())};
    batch.upload(TensorAccess::make(storage, 0, DType::f32, shape, dense_strides(Layout::bhnd, shape)),
                 make_view(static_cast<const void*>(values.data()), DType::f32, Layout::bhnd, shape));
    return storage;
}

// The backward's path and kernels for `options` (BackwardChoice): texel loads only where every
// tensor read through them can take them; the fused kernels unless asked for three stages, or,
// chosen automatically, where the device lacks their subgroup operations or the sequence passes
// their loop budget. The forward's split path has no backward of its own: the fused one serves it.
BackwardChoice choose_backward_path(const vk::DeviceCaps& caps, const Problem& p, const AttentionSpec& spec,
                                    const DeviceAttentionInputs& in, const DeviceTensor& grad_out,
                                    const AttentionOptions& options) {
    // Texel loads: views the buffers allow, rows that start on 4 elements (the caller's buffers may
    // lack texel usage: wrap()).
    VariantOverrides variant = options.variant;
    for (const auto& [t, name] : {std::pair{&in.q, "q"}, std::pair{&in.k, "k"}, std::pair{&in.v, "v"},
                                  std::pair{&grad_out, "grad_out"}}) {
        const Storage& storage = *TensorAccess::storage(*t);
        if (element_base(*t) % 4 != 0 || !storage.texel_views()) {
            if (variant.texel_loads == true)
                require_usage(storage, VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT, name, "texel loads (forced by variant.texel_loads)");
            variant.texel_loads = false;
        }
    }
    std::string why;
    // A fused kernel forced (coopmat, on workgroup matrices or not) shapes the fused backward only:
    // three stages asked for never read it.
    VariantOverrides fused_variant = variant;
    if (options.impl == Impl::unfused) {
        fused_variant.fused_kernel.reset();
        fused_variant.workgroup_matrices.reset();
    }
    const std::optional<BackwardConfig> fused =
        choose_backward(caps, p, spec.q.strides, spec.k.strides, spec.v.strides, grad_out.strides(), fused_variant, &why);
    BackwardChoice choice;
    choice.path = options.impl == Impl::unfused ? Impl::unfused : Impl::fused;
    if (options.impl == Impl::automatic && (!fused || !backward_fused_misfit(caps, *fused, p).empty()))
        choice.path = Impl::unfused;
    if (choice.path == Impl::fused && !fused)
        throw ResourceLimit("the device cannot run the fused backward pass: " + why + " (the unfused one needs none of it).");
    if (fused) choice.fused = *fused;
    choice.unfused = choose_unfused_backward(caps, p, spec.q.strides, spec.k.strides, spec.v.strides, grad_out.strides(), variant);
    return choice;
}

}  // namespace

AttentionReport record_backward(BatchState& batch, const DeviceAttentionInputs& in, const DeviceTensor& o,
                                const DeviceTensor& lse, const DeviceTensor& grad_out,
                                const DeviceAttentionGradients& grads, const AttentionOptions& options) {
    Runtime& runtime = *batch.runtime;
    runtime.ensure_usable();
    if (in.paged.defined()) throw InvalidArgument("paged", "the backward pass takes dense k and v, not a paged cache.");
    if (in.varlen.defined()) throw InvalidArgument("varlen", "the backward pass does not take packed sequences yet.");
    if (!in.k.defined() || !in.v.defined()) throw InvalidArgument(in.k.defined() ? "v" : "k", "the tensor is empty.");
    check_backward_types(in.k.dtype(), in.v.dtype());
    if (!lse.defined()) throw InvalidArgument("lse", "the backward pass needs the forward's log-sum-exp.");
    const AttentionSpec spec = spec_of(in, DeviceAttentionOutputs{.o = o, .lse = lse}, options);
    const Problem p = resolve(spec);
    const std::array<std::int64_t, 4> lse_shape{p.B, p.Hq, p.Nq, 1};
    if (lse.dtype() != DType::f32 || lse.shape() != lse_shape || lse.strides() != dense_strides(Layout::bhnd, lse_shape))
        throw InvalidArgument("lse", "must be f32, contiguous, of shape " + shape_text(lse_shape) + " (the forward's).");
    if (!grad_out.defined()) throw InvalidArgument("grad_out", "the tensor is empty.");
    check_backward(p, spec,
                   {.grad_out = {grad_out.dtype(), grad_out.shape(), grad_out.strides()},
                    .dq = layout_if(grads.dq),
                    .dk = layout_if(grads.dk),
                    .dv = layout_if(grads.dv),
                    .d_sinks = grads.d_sinks.defined(),
                    .d_float_mask = grads.d_float_mask.defined()});
    if (grads.d_sinks.defined() && (grads.d_sinks.dtype() != DType::f32 || grads.d_sinks.elements() != p.Hq))
        throw InvalidArgument("d_sinks", "must be f32 with Hq = " + std::to_string(p.Hq) + " contiguous elements.");
    const std::uint64_t storage_alignment = runtime.device().caps().min_storage_offset_alignment;
    if (grads.d_sinks.defined()) require_aligned_offset(grads.d_sinks, storage_alignment, "d_sinks");
    if (grads.d_float_mask.defined()) {
        const DeviceTensor& m = grads.d_float_mask;
        if (m.dtype() != DType::f32 || m.shape() != in.float_mask.shape() || !m.contiguous())
            throw InvalidArgument("d_float_mask", "must be f32, contiguous, of the float mask's shape " +
                                                      shape_text(in.float_mask.shape()) + ".");
        require_aligned_offset(m, storage_alignment, "d_float_mask");
    }
    if (in.kv_lengths.defined()) {
        if (in.kv_lengths.dtype() != DType::i32 || in.kv_lengths.elements() != p.B)
            throw InvalidArgument("kv_lengths", "must be i32 with B = " + std::to_string(p.B) + " contiguous elements.");
        require_aligned_offset(in.kv_lengths, storage_alignment, "kv_lengths");
    }
    if (grads.dk.defined() != grads.dv.defined())
        throw InvalidArgument(grads.dk.defined() ? "dv" : "dk", "the backward pass computes dK and dV together; give both.");
    for (const auto& [t, name] : {std::pair{&in.q, "q"}, std::pair{&in.k, "k"}, std::pair{&in.v, "v"}, std::pair{&o, "o"},
                                  std::pair{&lse, "lse"}, std::pair{&grad_out, "grad_out"}, std::pair{&in.kv_lengths, "kv_lengths"},
                                  std::pair{&in.bool_mask, "bool_mask"}, std::pair{&in.float_mask, "float_mask"},
                                  std::pair{&grads.dq, "dq"}, std::pair{&grads.dk, "dk"}, std::pair{&grads.dv, "dv"},
                                  std::pair{&grads.d_sinks, "d_sinks"}, std::pair{&grads.d_float_mask, "d_float_mask"}})
        if (t->defined()) storage_of(*t, runtime, name);

    BackwardOperands ops;
    ops.forward.q = operand_of(in.q, in.q.strides());
    ops.forward.k = operand_of(in.k, in.k.strides());
    ops.forward.v = operand_of(in.v, in.v.strides());
    ops.forward.o = operand_of(o, o.strides());
    ops.forward.lse = operand_of(lse, {p.Hq * p.Nq, p.Nq, 1, 0});
    if (in.bool_mask.defined()) ops.forward.bool_mask = operand_of(in.bool_mask, p.bool_mask.strides);
    if (in.float_mask.defined()) ops.forward.float_mask = operand_of(in.float_mask, p.float_mask.strides);
    ops.grad_out = operand_of(grad_out, grad_out.strides());
    // Gradients not asked for are never bound: a placeholder operand plans their (unused) slices.
    const Operand none{{0, 0, 0, 1}, 0, 16};
    ops.dq = grads.dq.defined() ? operand_of(grads.dq, grads.dq.strides()) : none;
    ops.dk = grads.dk.defined() ? operand_of(grads.dk, grads.dk.strides()) : none;
    ops.dv = grads.dv.defined() ? operand_of(grads.dv, grads.dv.strides()) : none;
    ops.d_sinks = grads.d_sinks.defined();
    ops.d_float_mask = grads.d_float_mask.defined();

    // The tuner's backward winner for this problem's bucket where the caller forced nothing and the
    // winner can run it here (planned: a bucket spans lengths 8× apart, whose loop budget or bindings
    // the measured one's may not share); else the options' (or the heuristics') choice.
    const vk::DeviceCaps& caps = runtime.device().caps();
    auto choose = [&](const AttentionOptions& opts) {
        return choose_backward_path(caps, p, spec, in, grad_out, opts);
    };
    std::optional<BackwardRun> run;
    std::string chosen_by = nothing_forced(options) ? "heuristics" : "caller";
    const TuningTable* tuning = batch.tuning ? batch.tuning->get() : nullptr;
    if (tuning && nothing_forced(options))
        if (const std::string* name = tuning->backward_winner(p))
            if (const KernelVariant* winner = find_backward_variant(*name)) {
                AttentionOptions t = options;
                t.impl = winner->impl;
                t.variant = winner->overrides;
                try {
                    run.emplace(runtime, p, choose(t), ops);
                    chosen_by = "tuning";
                } catch (const InvalidArgument&) {
                    // The winner cannot run this problem here (its bucket's other shapes could): the rules decide.
                } catch (const ResourceLimit&) {
                }
            }
    if (!run) run.emplace(runtime, p, choose(options), ops);
    run->report.chosen_by = chosen_by;

    auto placeholder = allocate_storage(runtime, 16, "a placeholder binding");
    std::shared_ptr<Storage> head_terms;
    const std::vector<float> terms = head_terms_of(p);
    if (!terms.empty()) head_terms = constants(runtime, batch, terms);

    BackwardBuffers buffers;
    DeviceBuffers& f = buffers.forward;
    auto buffer = [](const DeviceTensor& t) { return &TensorAccess::storage(t)->buffer; };
    f.q = buffer(in.q);
    f.k = buffer(in.k);
    f.v = buffer(in.v);
    f.o = buffer(o);
    f.lse = buffer(lse);
    f.lengths = f.bool_mask = f.float_mask = f.head_terms = &placeholder->buffer;
    f.lengths_slice = whole(16);
    if (in.kv_lengths.defined()) {
        f.lengths = buffer(in.kv_lengths);
        f.lengths_slice = ints_slice(*f.lengths, in.kv_lengths.offset_bytes(), p.B);
    }
    if (in.bool_mask.defined()) f.bool_mask = buffer(in.bool_mask);
    if (in.float_mask.defined()) f.float_mask = buffer(in.float_mask);
    if (head_terms) {
        f.head_terms = &head_terms->buffer;
        f.head_terms_bytes = terms.size() * 4;
    }
    buffers.grad_out = buffer(grad_out);
    if (grads.dq.defined()) buffers.dq = buffer(grads.dq);
    if (grads.dk.defined()) buffers.dk = buffer(grads.dk);
    if (grads.dv.defined()) buffers.dv = buffer(grads.dv);
    if (grads.d_sinks.defined()) {
        buffers.d_sinks = buffer(grads.d_sinks);
        buffers.d_sinks_offset = grads.d_sinks.offset_bytes();
    }
    if (grads.d_float_mask.defined()) {
        buffers.d_float_mask = buffer(grads.d_float_mask);
        buffers.d_float_mask_offset = grads.d_float_mask.offset_bytes();
    }

    auto program = std::make_shared<Program>(runtime);
    run->record(*program, buffers);
    if (runtime.poison_outputs())
        for (const DeviceTensor* t : {&grads.dq, &grads.dk, &grads.dv, &grads.d_sinks, &grads.d_float_mask})
            if (t->defined() && (TensorAccess::storage(*t)->usage & VK_BUFFER_USAGE_TRANSFER_DST_BIT) &&
                span_bytes(*t) == packed_bytes(*t) && t->offset_bytes() % 4 == 0 && span_bytes(*t) >= 4)
                batch.fill(*t, nan_word(t->dtype()));
    program->replay(batch.begin_op());
    batch.keep(program);
    batch.keep(placeholder);
    if (head_terms) batch.keep(head_terms);
    for (const DeviceTensor* t : {&in.q, &in.k, &in.v, &o, &lse, &grad_out, &in.kv_lengths, &in.bool_mask, &in.float_mask,
                                  &grads.dq, &grads.dk, &grads.dv, &grads.d_sinks, &grads.d_float_mask})
        if (t->defined()) batch.keep(TensorAccess::storage(*t));
    return run->report;
}

}  // namespace detail

AttentionReport attention_backward(Batch& batch, const DeviceAttentionInputs& inputs, const DeviceTensor& o,
                                   const DeviceTensor& lse, const DeviceTensor& grad_out,
                                   const DeviceAttentionGradients& grads, const AttentionOptions& options) {
    return detail::record_backward(detail::BatchAccess::state(batch), inputs, o, lse, grad_out, grads, options);
}

}  // namespace vkattn

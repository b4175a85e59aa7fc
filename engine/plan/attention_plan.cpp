#include <algorithm>
#include <string>

#include "attention/kernels.hpp"
#include "attention/params.hpp"
#include "plan/paged_kv.hpp"
#include "plan/varlen.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "submit/host_copy.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/plan.hpp"

namespace vkattn {
namespace detail {
namespace {

// The tensors of one run, checked against the plan: each with its storage, or null when absent.
struct Bound {
    struct Tensor {
        const DeviceTensor* tensor = nullptr;
        Storage* storage = nullptr;
    };
    Tensor q, k, v, o, kv_lengths, bool_mask, float_mask, weights, lse, logits;
    Tensor block_table;                 // paged: the table and the pools (k and v absent)
    std::vector<Tensor> k_pools, v_pools;
    Tensor cu_q, cu_k;                  // varlen
    std::vector<const Tensor*> all() const {
        std::vector<const Tensor*> list{&q, &k, &v, &o, &kv_lengths, &bool_mask, &float_mask, &weights, &lse, &logits,
                                        &block_table, &cu_q, &cu_k};
        for (const auto* pools : {&k_pools, &v_pools})
            for (const Tensor& t : *pools) list.push_back(&t);
        return list;
    }
};

Bound::Tensor check_tensor(const PlanState& plan, const DeviceTensor& t, const TensorLayout& layout, const char* name) {
    Storage& storage = storage_of(t, *plan.runtime, name);
    if (t.dtype() != layout.dtype)
        throw InvalidArgument(name, "its dtype is " + to_string(t.dtype()) + " but the plan was made for " +
                                        to_string(layout.dtype) + ".");
    if (t.shape() != layout.shape)
        throw InvalidArgument(name, "its shape is " + shape_text(t.shape()) + " but the plan was made for " +
                                        shape_text(layout.shape) + "; make a plan for this shape.");
    if (t.strides() != layout.strides)
        throw InvalidArgument(name, "its strides are " + shape_text(t.strides()) + " but the plan was made for " +
                                        shape_text(layout.strides) + "; make a plan for this layout.");
    return {&t, &storage};
}

// An optional tensor: present exactly when the plan expects it, of the dtype and element count
// given, contiguous.
Bound::Tensor check_optional(const PlanState& plan, const DeviceTensor& t, bool expected, DType dtype,
                             const std::array<std::int64_t, 4>& shape, const char* name) {
    if (!expected) {
        if (t.defined())
            throw InvalidArgument(name, "the plan was made without it; make a plan with it to pass it.");
        return {};
    }
    if (!t.defined()) throw InvalidArgument(name, "the plan was made with it; this run must pass it too.");
    Storage& storage = storage_of(t, *plan.runtime, name);
    if (t.dtype() != dtype)
        throw InvalidArgument(name, "its dtype is " + to_string(t.dtype()) + " but must be " + to_string(dtype) + ".");
    if (t.shape() != shape)
        throw InvalidArgument(name, "its shape is " + shape_text(t.shape()) + " but must be " + shape_text(shape) + ".");
    if (!t.contiguous()) throw InvalidArgument(name, "it must be contiguous.");
    return {&t, &storage};
}

void check_constants(std::span<const float> given, const std::vector<float>& planned, const char* name) {
    if (!given.empty() && !std::equal(given.begin(), given.end(), planned.begin(), planned.end()))
        throw InvalidArgument(name, "the values differ from the ones the plan was made with; they are part of the plan.");
}

// A paged K/V checked against the plan's: the same geometry, each tensor of this context, each pool
// and the table at an offset the device can bind.
void bind_paged(const PlanState& plan, const DevicePagedKv& paged, Bound& b) {
    const PagedSpec given = paged_spec(paged);
    if (given.block_size != plan.spec.paged->block_size || given.table_stride != plan.spec.paged->table_stride ||
        given.blocks_per_pool != plan.spec.paged->blocks_per_pool || given.blocks != plan.spec.paged->blocks ||
        given.pools != plan.spec.paged->pools || given.units != plan.spec.paged->units ||
        paged.k_pools[0].dtype() != plan.spec.k.dtype ||
        paged.k_pools[0].shape()[2] != plan.problem.Hkv || paged.k_pools[0].shape()[3] != plan.problem.Dk ||
        paged.v_pools[0].shape()[3] != plan.problem.Dv || paged.block_table.shape()[0] != plan.problem.B)
        throw InvalidArgument("paged", "its pools or block table (" + paged_text(given) + ") differ from the plan's (" +
                                           paged_text(*plan.spec.paged) + ") or from its dtype, batch, heads, head "
                                           "dimensions or layout; make a plan for this cache.");
    const auto& caps = plan.runtime->device().caps();
    auto check = [&](const DeviceTensor& t, const std::string& name, std::uint64_t align) {
        Storage& storage = storage_of(t, *plan.runtime, name.c_str());
        require_aligned_offset(t, align, name.c_str());
        return Bound::Tensor{&t, &storage};
    };
    b.block_table = check(paged.block_table, "paged.block_table", caps.min_storage_offset_alignment);
    for (std::size_t i = 0; i < paged.k_pools.size(); ++i) {
        b.k_pools.push_back(check(paged.k_pools[i], "paged.k_pools[" + std::to_string(i) + "]", binding_alignment(caps)));
        b.v_pools.push_back(check(paged.v_pools[i], "paged.v_pools[" + std::to_string(i) + "]", binding_alignment(caps)));
    }
}

// Per-sequence integers (key lengths, cu_seqlens): present exactly when the plan expects them; i32,
// `count` contiguous elements (`what`), at an offset the device binds as a storage buffer.
Bound::Tensor check_ints(const PlanState& plan, const DeviceTensor& t, bool expected, std::int64_t count,
                         const char* what, const char* name) {
    const Bound::Tensor bound = check_optional(plan, t, expected, DType::i32, t.shape(), name);
    if (!bound.tensor) return bound;
    if (t.elements() != count)
        throw InvalidArgument(name, "it holds " + std::to_string(t.elements()) + " " + what + " but the plan's " +
                                        std::to_string(plan.problem.B) + " sequences take " + std::to_string(count) + ".");
    require_aligned_offset(t, plan.runtime->device().caps().min_storage_offset_alignment, name);
    return bound;
}

Bound bind(const PlanState& plan, const DeviceAttentionInputs& in, const DeviceAttentionOutputs& out) {
    const AttentionSpec& s = plan.spec;
    const Problem& p = plan.problem;
    Bound b;
    // Packed (varlen) tensors are checked against their own layouts, not the virtual ones.
    const std::optional<VarlenSpec>& packed = s.varlen;
    if (packed.has_value() != in.varlen.defined())
        throw InvalidArgument("varlen", packed ? "the plan was made for packed sequences; this run must pass cu_seqlens."
                                               : "the plan was made without packed sequences; make a plan with varlen.");
    if (packed && in.varlen.max_seqlen_q != p.Nq)
        throw InvalidArgument("varlen.max_seqlen_q", "it is " + std::to_string(in.varlen.max_seqlen_q) +
                                                         " but the plan was made for " + std::to_string(p.Nq) + ".");
    if (packed && !packed->k && in.varlen.max_seqlen_k != 0)
        throw InvalidArgument("varlen.max_seqlen_k", "it goes with cu_seqlens_k, which this plan has not.");
    if (packed && packed->k && in.varlen.max_seqlen_k != p.Nkv)
        throw InvalidArgument("varlen.max_seqlen_k", "it is " + std::to_string(in.varlen.max_seqlen_k) +
                                                         " but the plan was made for " + std::to_string(p.Nkv) + ".");
    b.cu_q = check_ints(plan, in.varlen.cu_seqlens_q, packed.has_value(), p.B + 1, "offsets", "varlen.cu_seqlens_q");
    b.cu_k = check_ints(plan, in.varlen.cu_seqlens_k, packed && packed->k, p.B + 1, "offsets", "varlen.cu_seqlens_k");
    b.q = check_tensor(plan, in.q, packed ? packed->q : s.q, "q");
    if (s.paged) {
        if (in.k.defined() || in.v.defined())
            throw InvalidArgument(in.k.defined() ? "k" : "v", "the plan reads a paged K/V from `paged`; leave k and v empty.");
        if (!in.paged.defined()) throw InvalidArgument("paged", "the plan was made for a paged K/V; this run must pass one.");
        bind_paged(plan, in.paged, b);
    } else {
        if (in.paged.defined())
            throw InvalidArgument("paged", "the plan was made for k and v tensors; make a plan for the paged K/V.");
        b.k = check_tensor(plan, in.k, packed && packed->k ? *packed->k : s.k, "k");
        b.v = check_tensor(plan, in.v, packed && packed->v ? *packed->v : s.v, "v");
    }
    b.o = check_tensor(plan, out.o, packed ? packed->o : s.o, "o");
    b.kv_lengths = check_ints(plan, in.kv_lengths, s.kv_lengths, p.B, "lengths", "kv_lengths");
    b.bool_mask = check_optional(plan, in.bool_mask, s.bool_mask.has_value(), DType::u8,
                                 s.bool_mask ? rank4(*s.bool_mask) : in.bool_mask.shape(), "bool_mask");
    b.float_mask = check_optional(plan, in.float_mask, s.float_mask.has_value(), DType::f32,
                                  s.float_mask ? rank4(*s.float_mask) : in.float_mask.shape(), "float_mask");
    b.weights = check_optional(plan, out.weights, s.weights, DType::f32, {p.B, p.Hq, p.Nq, p.Nkv}, "weights");
    b.logits = check_optional(plan, out.logits, s.logits, DType::f32, {p.B, p.Hq, p.Nq, p.Nkv}, "logits");
    b.lse = check_optional(plan, out.lse, s.lse, DType::f32,
                           p.packed_q ? std::array<std::int64_t, 4>{1, p.Hq, p.total_q, 1} : std::array<std::int64_t, 4>{p.B, p.Hq, p.Nq, 1},
                           "lse");
    check_constants(in.alibi_slopes, s.alibi_slopes, "alibi_slopes");
    check_constants(in.sinks, s.sinks, "sinks");
    check_constants(in.k_scale, s.k_scale, "k_scale");
    check_constants(in.v_scale, s.v_scale, "v_scale");
    // Texel loads read vec4s: the rows must start at multiples of 4 elements, the strides (the
    // plan's) and the first element (this run's) alike.
    const bool texel_qk = plan.choice.impl == Impl::unfused ? plan.choice.unfused.scores.texel : plan.choice.fused.texel;
    const bool texel_v = plan.choice.impl == Impl::unfused ? plan.choice.unfused.output.texel : plan.choice.fused.texel;
    for (const auto& [tensor, texel, name] : {std::tuple{&in.q, texel_qk, "q"}, std::tuple{&in.k, texel_qk, "k"},
                                              std::tuple{&in.v, texel_v, "v"}}) {
        if (!tensor->defined()) continue;  // paged: the pools' offsets are checked above
        const std::int64_t first = element_base(*tensor);
        if (texel && first % 4 != 0)
            throw InvalidArgument(name, "the plan reads it as vec4 texels, so it must start at a multiple of 4 "
                                        "elements of its memory, not at element " + std::to_string(first) +
                                        "; make the plan from tensors that start where this one does.");
    }
    // The caller's buffers may lack texel views (wrap); the plan chose its loads for those it was made with.
    std::vector<std::tuple<const Bound::Tensor*, bool, std::string>> read{{&b.q, texel_qk, "q"}, {&b.k, texel_qk, "k"},
                                                                         {&b.v, texel_v, "v"}};
    for (std::size_t i = 0; i < b.k_pools.size(); ++i) {
        read.emplace_back(&b.k_pools[i], texel_qk, "paged.k_pools[" + std::to_string(i) + "]");
        read.emplace_back(&b.v_pools[i], texel_v, "paged.v_pools[" + std::to_string(i) + "]");
    }
    for (const auto& [t, texel, name] : read)
        if (texel && t->storage && !t->storage->texel_views())
            throw InvalidArgument(name, "the plan reads it through texel views, and its buffer was created without "
                                        "VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT; make the plan from tensors of this buffer.");
    return b;
}

Operand operand(const Bound::Tensor& t, const std::array<std::int64_t, 4>& strides) {
    return {strides, element_base(*t.tensor), t.storage->buffer.size()};
}

}  // namespace

PlanState::PlanState(Runtime& rt, const TuningTable* tuning, AttentionSpec s)
    : runtime(&rt), spec(std::move(s)), problem(resolve(spec)) {
    rt.ensure_usable();
    choice = choose_path(rt, tuning, problem, spec.q.strides, spec.k.strides, spec.v.strides, spec.options, spec.paged.has_value());
    Operands own = own_buffer_operands(problem, spec.q.strides, spec.k.strides, spec.v.strides, spec.o.strides);
    if (spec.paged) own.paged = paged_operands(*spec.paged, problem);
    if (spec.varlen) own_packed_operands(own, *spec.varlen, problem);
    const auto path = make_path(rt, problem, choice, own);  // refuses what cannot fit, before any allocation
    report = path->report;
    scratch_bytes = path->scratch_bytes() + (problem.want_lse ? 0 : allocated_bytes(lse_bytes(problem)));
    // Build the main pipelines now, so the first run records only.
    if (choice.impl == Impl::unfused) {
        bmm_kernel(rt, choice.unfused.scores, BmmForm::a_bt, problem.dtype, problem.k_dtype, DType::f32);
        softmax_kernel(rt, choice.unfused.softmax);
        bmm_kernel(rt, choice.unfused.output, BmmForm::a_b, DType::f32, problem.v_dtype, problem.dtype);
    } else {
        flash_kernel(rt, choice.fused, operand_types(problem), choice.impl == Impl::split,
                     spec.paged ? static_cast<std::uint32_t>(spec.paged->pools) : 0);
        if (choice.impl == Impl::split) combine_kernel(rt, problem.dtype);
    }
    // A placeholder for unused bindings (never read), and the per-head terms (mask.glsl's layout:
    // ALiBi slopes and sinks, each [Hq], then fp8 K's and V's scales, each [Hkv]; zeros and ones for
    // those not given), which every run writes into the batch before its dispatches (inside the
    // command buffer): a plan never submits on its own.
    placeholder = allocate_storage(rt, 16, "a placeholder binding");
    head_terms_values = head_terms_of(problem);
    if (!head_terms_values.empty()) {
        head_terms_bytes = head_terms_values.size() * 4;
        head_terms = allocate_storage(rt, head_terms_bytes, "the per-head terms (ALiBi slopes, sinks, fp8 scales)");
    }
}

void PlanState::prepare(BatchState& batch) const {
    if (!head_terms) return;
    const std::array<std::int64_t, 4> shape{1, 1, 1, static_cast<std::int64_t>(head_terms_values.size())};
    batch.upload(TensorAccess::make(head_terms, 0, DType::f32, shape, dense_strides(Layout::bhnd, shape)),
                 make_view(static_cast<const void*>(head_terms_values.data()), DType::f32, Layout::bhnd, shape));
}

void PlanState::record(Program& program, const DeviceAttentionInputs& in, const DeviceAttentionOutputs& out) const {
    const Bound b = bind(*this, in, out);
    const Problem& p = problem;
    Operands ops;
    DeviceBuffers buffers;
    // Packed (varlen) tensors: their virtual strides (batch stride 0), every row bound.
    ops.q = p.packed_q ? operand(b.q, in.q.strides()).packed(p.total_q) : operand(b.q, in.q.strides());
    if (spec.paged) {
        ops.paged = paged_operands(*spec.paged, p);
        for (std::size_t i = 0; i < b.k_pools.size(); ++i) {
            buffers.k_pools[i] = &b.k_pools[i].storage->buffer;
            buffers.v_pools[i] = &b.v_pools[i].storage->buffer;
            buffers.k_pool_offsets[i] = b.k_pools[i].tensor->offset_bytes();
            buffers.v_pool_offsets[i] = b.v_pools[i].tensor->offset_bytes();
        }
        buffers.block_table = &b.block_table.storage->buffer;
        const std::uint64_t offset = b.block_table.tensor->offset_bytes();
        buffers.table_slice = {offset, std::min<std::uint64_t>((span_bytes(*b.block_table.tensor) + 15) / 16 * 16,
                                                               buffers.block_table->size() - offset), {}};
    } else {
        ops.k = p.packed_k ? operand(b.k, in.k.strides()).packed(p.total_k) : operand(b.k, in.k.strides());
        ops.v = p.packed_k ? operand(b.v, in.v.strides()).packed(p.total_k) : operand(b.v, in.v.strides());
        buffers.k = &b.k.storage->buffer;
        buffers.v = &b.v.storage->buffer;
    }
    ops.o = p.packed_q ? operand(b.o, out.o.strides()).packed(p.total_q) : operand(b.o, out.o.strides());
    const std::array<std::int64_t, 4> lse_layout = lse_strides(p);
    if (b.lse.tensor) {
        ops.lse = operand(b.lse, lse_layout);
        buffers.lse = &b.lse.storage->buffer;
    } else {
        buffers.lse = &program.scratch(lse_bytes(p), "lse");
        ops.lse = {lse_layout, 0, buffers.lse->size()};
    }
    if (p.packed_q) ops.lse.packed_rows = p.total_q;
    if (b.weights.tensor) {
        ops.weights = operand(b.weights, {p.Hq * p.Nq * p.Nkv, p.Nq * p.Nkv, p.Nkv, 1});
        buffers.weights = &b.weights.storage->buffer;
    }
    if (b.logits.tensor) {
        ops.logits = operand(b.logits, {p.Hq * p.Nq * p.Nkv, p.Nq * p.Nkv, p.Nkv, 1});
        buffers.logits = &b.logits.storage->buffer;
    }
    buffers.q = &b.q.storage->buffer;
    buffers.o = &b.o.storage->buffer;
    buffers.bool_mask = buffers.float_mask = buffers.lengths = buffers.head_terms = &placeholder->buffer;
    buffers.lengths_slice = whole(16);
    buffers.cu_q = buffers.cu_k = &placeholder->buffer;
    buffers.cu_q_slice = buffers.cu_k_slice = whole(16);
    // Per-sequence integers (key lengths, cu_seqlens) bound from their first one, `count` of them.
    for (auto [t, buffer, slice, count] : {std::tuple{&b.kv_lengths, &buffers.lengths, &buffers.lengths_slice, p.B},
                                           std::tuple{&b.cu_q, &buffers.cu_q, &buffers.cu_q_slice, p.B + 1},
                                           std::tuple{&b.cu_k, &buffers.cu_k, &buffers.cu_k_slice, p.B + 1}}) {
        if (!t->tensor) continue;
        *buffer = &t->storage->buffer;
        *slice = ints_slice(**buffer, t->tensor->offset_bytes(), count);
    }
    if (b.bool_mask.tensor) {
        ops.bool_mask = operand(b.bool_mask, p.bool_mask.strides);
        buffers.bool_mask = &b.bool_mask.storage->buffer;
    }
    if (b.float_mask.tensor) {
        ops.float_mask = operand(b.float_mask, p.float_mask.strides);
        buffers.float_mask = &b.float_mask.storage->buffer;
    }
    if (head_terms) {
        buffers.head_terms = &head_terms->buffer;
        buffers.head_terms_bytes = head_terms_bytes;
    }
    make_path(*runtime, p, choice, ops)->record(program, buffers);
}

void PlanState::keep_constants(BatchState& batch) const {
    batch.keep(placeholder);
    if (head_terms) batch.keep(head_terms);
}

void PlanState::run(BatchState& batch, const DeviceAttentionInputs& in, const DeviceAttentionOutputs& out,
                    bool cache) const {
    const Bound b = bind(*this, in, out);
    ++runs;
    ProgramKey key;
    for (const Bound::Tensor* t : b.all()) {
        key.storages.push_back(t->tensor ? TensorAccess::storage(*t->tensor) : nullptr);
        key.offsets.push_back(t->tensor ? t->tensor->offset_bytes() : 0);
    }
    std::shared_ptr<Program> program = cache ? programs.find(key) : nullptr;
    if (!program) {
        program = std::make_shared<Program>(*runtime);
        record(*program, in, out);
        ++bindings_built;
        if (cache) programs.insert(key, program);
    }
    if (runtime->poison_outputs()) {
        for (const Bound::Tensor* t : {&b.o, &b.weights, &b.lse, &b.logits}) {
            // The caller's buffers may not take copies (wrap): those go unpoisoned.
            if (!t->tensor || !(t->storage->usage & VK_BUFFER_USAGE_TRANSFER_DST_BIT)) continue;
            const DeviceTensor& tensor = *t->tensor;
            // Tensors without gaps only (a gap may be someone else's data), in whole words: an
            // f16 tensor of odd size keeps its last element unpoisoned.
            const std::uint64_t bytes = span_bytes(tensor);
            if (bytes == packed_bytes(tensor) && tensor.offset_bytes() % 4 == 0 && bytes >= 4)
                vkCmdFillBuffer(batch.begin_op(), t->storage->buffer.get(), tensor.offset_bytes(), bytes / 4 * 4,
                                nan_word(tensor.dtype()));
        }
    }
    prepare(batch);
    program->replay(batch.begin_op());
    // Everything the commands use lives until the submission completes, even if the caller drops
    // the plan or the tensors first.
    batch.keep(program);
    keep_constants(batch);
    for (auto& storage : key.storages)
        if (storage) batch.keep(std::move(storage));
}

}  // namespace detail

AttentionPlan::AttentionPlan(std::shared_ptr<detail::PlanState> state) : state_(std::move(state)) {}

AttentionPlan::AttentionPlan(Context& context, const DeviceAttentionInputs& in, const DeviceAttentionOutputs& out,
                             const AttentionOptions& options)
    : state_(std::make_shared<detail::PlanState>(detail::ContextAccess::runtime(context),
                                                 detail::ContextAccess::state(context).tuning.get(),
                                                 detail::spec_of(in, out, options))) {}

AttentionPlan::~AttentionPlan() = default;
AttentionPlan::AttentionPlan(const AttentionPlan&) = default;
AttentionPlan& AttentionPlan::operator=(const AttentionPlan&) = default;

void AttentionPlan::run(Batch& batch, const DeviceAttentionInputs& in, const DeviceAttentionOutputs& out) const {
    detail::BatchState& state = detail::BatchAccess::state(batch);
    if (state.runtime != state_->runtime)
        throw InvalidArgument("batch", "the batch belongs to another Context than the plan.");
    state_->run(state, in, out, true);
}

const AttentionReport& AttentionPlan::report() const { return state_->report; }

AttentionPlan::Stats AttentionPlan::stats() const { return {state_->runs.load(), state_->bindings_built.load()}; }

AttentionReport attention(Context& context, const DeviceAttentionInputs& in, const DeviceAttentionOutputs& out,
                          const AttentionOptions& options) {
    const auto plan = detail::ContextAccess::state(context).plan(detail::spec_of(in, out, options));
    Batch batch(context);
    detail::BatchState& state = detail::BatchAccess::state(batch);
    state.time_begin();
    plan->run(state, in, out, true);
    state.time_end();
    Submission submission = batch.submit();
    submission.wait();
    AttentionReport report = plan->report;
    report.gpu_ms = submission.gpu_ms();
    return report;
}

}  // namespace vkattn

// The multi-head layer's backward pass on the device. With rows r of the activations and
// Y = O·W_oᵀ + b_o, O the heads' attention over q = X_q·W_qᵀ + b_q (and k, v likewise):
//   dO = dY·W_o        dW_o = dYᵀ·O        db_o = Σ_r dY
//   dq, dk, dv         the core's backward (vkattn::attention_backward) over head views of dO
//   dW_i = d_iᵀ·X_i    db_i = Σ_r d_i      dX_i = d_i·W_i  (i = q, k, v; summed where inputs coincide)
// Every product is bmm.comp (record_product): Aᵀ·B for the weights, A·B for the rest, and the row
// sums are ones·A. The forward runs again first, for O and the core's log-sum-exp.
#include <memory>
#include <string>
#include <vector>

#include "attention/io.hpp"
#include "attention/backward.hpp"
#include "mha/linear.hpp"
#include "mha/mha_layer_state.hpp"
#include "plan/host_tensors.hpp"
#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"

namespace vkattn::detail {

AttentionReport record_backward(BatchState& batch, const std::shared_ptr<const MhaLayerState>& layer,
                                const MhaBackward& call) {
    const MhaLayerState& l = *layer;
    Runtime& runtime = *l.runtime;
    const MhaForward& c = call.forward;
    using P = MultiHeadAttention::Projection;
    const std::int64_t E = l.config.embed_dim, H = l.config.num_heads, q_rows = c.L * c.N, kv_rows = c.S * c.N;
    const std::int64_t features[3] = {E, l.config.kdim, l.config.vdim}, rows[3] = {q_rows, kv_rows, kv_rows};

    // The forward's projections and o, and the core's lse; dO and the core's gradients.
    const MhaLayerState::Scratch s = l.scratch(q_rows, kv_rows);
    const DeviceTensor q = l.rows(s.q, q_rows, E), k = l.rows(s.k, kv_rows, E), v = l.rows(s.v, kv_rows, E),
                       o = l.rows(s.o, q_rows, E);
    const DeviceTensor lse = own_dense(runtime, DType::f32, {c.N, H, c.L, 1}, "the layer's log-sum-exp");
    auto matrix = [&](std::int64_t r, const char* what) {
        return TensorAccess::make(allocate_storage(runtime, static_cast<std::uint64_t>(r * E) * size_of(l.dtype), what), 0,
                                  l.dtype, {1, 1, r, E}, dense_strides(Layout::bhnd, {1, 1, r, E}));
    };
    const DeviceTensor d_o = matrix(q_rows, "the layer's dO"), dq = matrix(q_rows, "the layer's dq"),
                       dk = matrix(kv_rows, "the layer's dk"), dv = matrix(kv_rows, "the layer's dv");
    // Ones of the layer's dtype: the row sums' left operand.
    const std::int64_t most_rows = std::max(q_rows, kv_rows);
    const DeviceTensor ones = own_dense(runtime, l.dtype, {1, 1, 1, most_rows}, "the layer's row-sum ones");
    write_fresh(batch, ones, in_dtype(std::vector<float>(static_cast<std::size_t>(most_rows), 1.0f).data(), most_rows, l.dtype).data());

    const DeviceAttentionInputs in{.q = l.heads(s.q, c.N, c.L), .k = l.heads(s.k, c.N, c.S),
                                   .v = l.heads(s.v, c.N, c.S), .bool_mask = c.bool_mask, .float_mask = c.float_mask};
    const DeviceAttentionOutputs out{.o = l.heads(s.o, c.N, c.L), .lse = lse};
    const std::shared_ptr<PlanState> core = ContextAccess::state(*l.context).plan(spec_of(in, out, c.options));
    const DeviceTensor* x[3] = {&c.x_q, &c.x_k, &c.x_v};
    const DeviceTensor* grad[3] = {&dq, &dk, &dv};
    auto bias = [&](int i) { return l.b[i].defined() ? &l.b[i] : nullptr; };

    // 1. The forward (for o and lse), then the output projection's gradients and dO.
    auto forward = std::make_shared<Program>(runtime);
    for (int i = 0; i < 3; ++i)
        record_linear(*forward, runtime, {x[i], &l.w[i], bias(i), i == 0 ? &q : i == 1 ? &k : &v, rows[i], features[i], E});
    forward->barrier();
    core->record(*forward, in, out);
    forward->barrier();
    record_product(*forward, runtime, {.form = BmmForm::a_b, .a = &call.grad_out, .b = &l.w[P::o], .c = &d_o, .m = q_rows, .n = E, .k = E});
    record_product(*forward, runtime,
                   {.form = BmmForm::at_b, .a = &call.grad_out, .b = &o, .c = &call.dw[P::o], .m = E, .n = E, .k = q_rows});
    if (call.db[P::o].defined())
        record_product(*forward, runtime,
                       {.form = BmmForm::a_b, .a = &ones, .b = &call.grad_out, .c = &call.db[P::o], .m = 1, .n = E, .k = q_rows});
    core->prepare(batch);
    forward->replay(batch.begin_op());

    // 2. The core's gradients over head views.
    const AttentionReport report =
        record_backward(batch, in, out.o, lse, l.heads(TensorAccess::storage(d_o), c.N, c.L),
                        {.dq = l.heads(TensorAccess::storage(dq), c.N, c.L), .dk = l.heads(TensorAccess::storage(dk), c.N, c.S),
                         .dv = l.heads(TensorAccess::storage(dv), c.N, c.S)},
                        c.options);

    // 3. The input projections' gradients; an input used twice sums its gradients in order.
    auto inputs = std::make_shared<Program>(runtime);
    for (int i = 0; i < 3; ++i) {
        record_product(*inputs, runtime,
                       {.form = BmmForm::at_b, .a = grad[i], .b = x[i], .c = &call.dw[i], .m = E, .n = features[i], .k = rows[i]});
        if (call.db[i].defined())
            record_product(*inputs, runtime,
                           {.form = BmmForm::a_b, .a = &ones, .b = grad[i], .c = &call.db[i], .m = 1, .n = E, .k = rows[i]});
    }
    for (int i = 0; i < 3; ++i) {
        int target = 0;  // the first input that is this one
        while (target < i && !same_tensor(*x[target], *x[i])) ++target;
        const bool adds = target != i;
        if (adds) inputs->barrier();  // after the product it adds to
        record_product(*inputs, runtime,
                       {.form = BmmForm::a_b, .a = grad[i], .b = &l.w[i], .c = &call.dx[target], .m = rows[i],
                        .n = features[i], .k = E, .residual = adds ? &call.dx[target] : nullptr});
    }
    inputs->replay(batch.begin_op());

    batch.keep(forward);
    batch.keep(inputs);
    batch.keep(core);
    core->keep_constants(batch);
    batch.keep(std::const_pointer_cast<MhaLayerState>(layer));
    for (const DeviceTensor* t : {&c.x_q, &c.x_k, &c.x_v, &c.bool_mask, &c.float_mask, &call.grad_out, &q, &k, &v, &o, &lse,
                                  &d_o, &dq, &dk, &dv, &ones, &call.dx[0], &call.dx[1], &call.dx[2]})
        if (t->defined()) batch.keep(TensorAccess::storage(*t));
    for (int i = 0; i < 4; ++i)
        for (const DeviceTensor* t : {&call.dw[i], &call.db[i]})
            if (t->defined()) batch.keep(TensorAccess::storage(*t));
    return report;
}

}  // namespace vkattn::detail

#include "ring_backward_checks.hpp"

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "attention/problem.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::distributed::detail {
namespace {

vkattn::detail::TensorLayout backward_layout_of(const auto& t) { return {t.dtype, t.shape, t.strides}; }

}  // namespace

// The backward's own checks (beyond prepare's): o, lse, grad_out and the gradients of this rank.
void check_backward_call(const RingSetup& r, const AttentionInputs& first, const AttentionOptions& block,
                         const AttentionInputs& shard, const TensorView& o, std::span<const float> lse,
                         const TensorView& grad_out, const AttentionGradients& grads) {
    const std::int64_t B = shard.q.shape[0], Hq = shard.q.shape[1], nq = shard.q.shape[2], Dv = shard.v.shape[3];
    const bool want_dq = grads.dq.data != nullptr, want_kv = grads.dk.data != nullptr;
    vkattn::detail::check_backward_types(shard.k.dtype, shard.v.dtype);
    if (grads.d_float_mask && !shard.float_mask)
        throw InvalidArgument("d_float_mask", "there is no float mask to differentiate; give float_mask or no "
                                              "d_float_mask.");
    if (want_kv != (grads.dv.data != nullptr))
        throw InvalidArgument(want_kv ? "dv" : "dk", "the backward pass computes dK and dV together; give both.");
    const std::array<std::int64_t, 4> o_shape{B, Hq, nq, Dv};
    for (const auto& [t, name] : {std::pair{&o, "o"}, std::pair{&grad_out, "grad_out"}}) {
        if (t->data == nullptr) throw InvalidArgument(name, "the tensor has no data pointer.");
        if (t->shape != o_shape || t->dtype != shard.q.dtype)
            throw InvalidArgument(name, "must be this rank's shard of the forward's o: " +
                                            vkattn::detail::shape_text(o_shape) + " of q's dtype.");
    }
    if (lse.size() != static_cast<std::size_t>(B * Hq * nq))
        throw InvalidArgument("lse", "has " + std::to_string(lse.size()) + " values but this rank's shard of the "
                                         "forward's log-sum-exp has B·Hq·n_q = " + std::to_string(B * Hq * nq) + ".");
    for (const auto& [grad, input, name, input_name] :
         {std::tuple{&grads.dq, &shard.q, "dq", "q"}, std::tuple{&grads.dk, &shard.k, "dk", "k"},
          std::tuple{&grads.dv, &shard.v, "dv", "v"}})
        if (grad->data != nullptr && grad->shape != input->shape)
            throw InvalidArgument(name, "the shape is " + vkattn::detail::shape_text(grad->shape) + " but must be " +
                                            input_name + "'s, " + vkattn::detail::shape_text(input->shape) + ".");
    // The engine's checks of the first pair's backward.
    const std::int64_t rows = r.q_segments[0].length, keys = first.k.shape[2];
    std::uint32_t unused = 0;
    const AttentionOutputs part{
        .o = make_view(static_cast<void*>(&unused), shard.q.dtype, Layout::bhnd, {B, Hq, rows, Dv})};
    const vkattn::detail::Problem p = vkattn::detail::resolve(first, part, block);
    vkattn::detail::check_backward(
        p, vkattn::detail::spec_of(first, part, block),
        {.grad_out = backward_layout_of(detail::rows(grad_out, 0, rows)),
         .dq = want_dq ? std::optional(backward_layout_of(detail::rows(grads.dq, 0, rows))) : std::nullopt,
         .dk = want_kv ? std::optional(backward_layout_of(detail::rows(grads.dk, 0, keys))) : std::nullopt,
         .dv = want_kv ? std::optional(backward_layout_of(detail::rows(grads.dv, 0, keys))) : std::nullopt,
         .d_sinks = grads.d_sinks != nullptr,
         .d_float_mask = grads.d_float_mask != nullptr});
}

}  // namespace vkattn::distributed::detail

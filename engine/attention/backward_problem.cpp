// The backward pass's arguments: the forward's checks (resolve) plus grad_out's and the gradients'.
#include <optional>
#include <string>

#include "attention/problem.hpp"
#include "tensor/storage_rules.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

TensorLayout layout_of(const TensorView& t) { return {t.dtype, t.shape, t.strides}; }
std::optional<TensorLayout> layout_if(const MutableTensorView& t) {
    if (t.data == nullptr) return std::nullopt;
    return TensorLayout{t.dtype, t.shape, t.strides};
}

// A gradient of `input` (named `input_name`): absent, or its input's shape and dtype in memory of
// its own elements.
void check_gradient(const std::optional<TensorLayout>& grad, const TensorLayout& input, const char* name,
                    const char* input_name) {
    if (!grad) return;
    if (grad->shape != input.shape)
        throw InvalidArgument(name, "the shape is " + shape_text(grad->shape) + " but must be " + input_name + "'s, " +
                                        shape_text(input.shape) + ".");
    if (grad->dtype != input.dtype)
        throw InvalidArgument(name, "its dtype is " + to_string(grad->dtype) + " but " + input_name + "'s is " +
                                        to_string(input.dtype) + "; a gradient has its input's dtype.");
    check_layout(*grad, name);
    if (!elements_disjoint(*grad))
        throw InvalidArgument(name, "the strides " + shape_text(grad->strides) +
                                        " make distinct elements share memory; every gradient element needs "
                                        "its own location.");
}

}  // namespace

void check_backward_types(DType k, DType v) {
    for (const auto& [dtype, name] : {std::pair{k, "k"}, std::pair{v, "v"}})
        if (is_kv_type(dtype) && !is_activation_type(dtype))
            throw InvalidArgument(name, "its dtype is " + to_string(dtype) +
                                            "; the backward pass takes float k and v (f32, f16, bf16): a "
                                            "quantized tensor is not trained.");
}

void check_backward(const Problem& p, const AttentionSpec& forward, const BackwardSpec& b) {
    const std::array<std::int64_t, 4> o_shape{p.B, p.Hq, p.Nq, p.Dv};
    if (b.grad_out.shape != o_shape)
        throw InvalidArgument("grad_out", "the shape is " + shape_text(b.grad_out.shape) +
                                              " but must be o's, [B, Hq, Nq, Dv] = " + shape_text(o_shape) + ".");
    if (b.grad_out.dtype != p.dtype)
        throw InvalidArgument("grad_out", "its dtype is " + to_string(b.grad_out.dtype) + " but q's (and o's) is " +
                                              to_string(p.dtype) + ".");
    check_layout(b.grad_out, "grad_out");
    check_gradient(b.dq, forward.q, "dq", "q");
    check_gradient(b.dk, forward.k, "dk", "k");
    check_gradient(b.dv, forward.v, "dv", "v");
    if (b.d_sinks && p.sinks.empty())
        throw InvalidArgument("d_sinks", "there are no sinks to differentiate; give sinks or no d_sinks.");
    if (b.d_float_mask && !p.float_mask.present())
        throw InvalidArgument("d_float_mask", "there is no float mask to differentiate; give float_mask or no "
                                              "d_float_mask.");
}

Problem resolve_backward(const AttentionInputs& inputs, const TensorView& grad_out, const AttentionGradients& grads,
                         const AttentionOptions& options) {
    check_backward_types(inputs.k.dtype, inputs.v.dtype);
    // This call runs its own forward, whose o and lse would be the block's, not the whole's: the
    // gradients of a block of a larger attention need the whole's (the device call takes them).
    if (!options.block.whole())
        throw InvalidArgument("block", "a block's backward needs the whole attention's o and lse; use the device "
                                       "attention_backward(batch, inputs, o, lse, ...) with them.");
    // The forward's checks, with a dense stand-in for o: grad_out may broadcast, which no output may.
    std::uint32_t unused = 0;
    AttentionOutputs forward;
    forward.o = make_view(static_cast<void*>(&unused), inputs.q.dtype, Layout::bhnd,
                          {inputs.q.shape[0], inputs.q.shape[1], inputs.q.shape[2], inputs.v.shape[3]});
    Problem p = resolve(inputs, forward, options);
    if (grad_out.data == nullptr) throw InvalidArgument("grad_out", "the tensor has no data pointer.");
    check_backward(p, spec_of(inputs, forward, options),
                   {.grad_out = layout_of(grad_out),
                    .dq = layout_if(grads.dq),
                    .dk = layout_if(grads.dk),
                    .dv = layout_if(grads.dv),
                    .d_sinks = grads.d_sinks != nullptr,
                    .d_float_mask = grads.d_float_mask != nullptr});
    return p;
}

}  // namespace vkattn::detail

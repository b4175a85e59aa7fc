// The backward pass's arguments: the forward's checks (resolve) plus grad_out's and the gradients'.
#include <string>

#include "attention/problem.hpp"
#include "tensor/storage_rules.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

TensorLayout layout_of(const TensorView& t) { return {t.dtype, t.shape, t.strides}; }

// A gradient of `input` (named `input_name`): absent, or its input's shape and dtype in memory of
// its own elements.
void check_gradient(const MutableTensorView& grad, const TensorView& input, const char* name,
                    const char* input_name) {
    if (grad.data == nullptr) return;
    const TensorLayout layout{grad.dtype, grad.shape, grad.strides};
    if (grad.shape != input.shape)
        throw InvalidArgument(name, "the shape is " + shape_text(grad.shape) + " but must be " + input_name +
                                        "'s, " + shape_text(input.shape) + ".");
    if (grad.dtype != input.dtype)
        throw InvalidArgument(name, "its dtype is " + to_string(grad.dtype) + " but " + input_name + "'s is " +
                                        to_string(input.dtype) + "; a gradient has its input's dtype.");
    check_layout(layout, name);
    if (!elements_disjoint(layout))
        throw InvalidArgument(name, "the strides " + shape_text(grad.strides) +
                                        " make distinct elements share memory; every gradient element needs "
                                        "its own location.");
}

}  // namespace

Problem resolve_backward(const AttentionInputs& inputs, const TensorView& grad_out, const AttentionGradients& grads,
                         const AttentionOptions& options) {
    for (const auto& [view, name] : {std::pair{&inputs.k, "k"}, std::pair{&inputs.v, "v"}})
        if (is_kv_type(view->dtype) && !is_activation_type(view->dtype))
            throw InvalidArgument(name, "its dtype is " + to_string(view->dtype) +
                                            "; the backward pass takes float k and v (f32, f16, bf16): a "
                                            "quantized tensor is not trained.");
    // The forward's checks, with a dense stand-in for o: grad_out may broadcast, which no output may.
    std::uint32_t unused = 0;
    AttentionOutputs forward;
    forward.o = make_view(static_cast<void*>(&unused), inputs.q.dtype, Layout::bhnd,
                          {inputs.q.shape[0], inputs.q.shape[1], inputs.q.shape[2], inputs.v.shape[3]});
    Problem p = resolve(inputs, forward, options);

    if (grad_out.data == nullptr) throw InvalidArgument("grad_out", "the tensor has no data pointer.");
    const std::array<std::int64_t, 4> o_shape{p.B, p.Hq, p.Nq, p.Dv};
    if (grad_out.shape != o_shape)
        throw InvalidArgument("grad_out", "the shape is " + shape_text(grad_out.shape) +
                                              " but must be o's, [B, Hq, Nq, Dv] = " + shape_text(o_shape) + ".");
    if (grad_out.dtype != p.dtype)
        throw InvalidArgument("grad_out", "its dtype is " + to_string(grad_out.dtype) + " but q's (and o's) is " +
                                              to_string(p.dtype) + ".");
    check_layout(layout_of(grad_out), "grad_out");

    check_gradient(grads.dq, inputs.q, "dq", "q");
    check_gradient(grads.dk, inputs.k, "dk", "k");
    check_gradient(grads.dv, inputs.v, "dv", "v");
    if (grads.d_sinks != nullptr && p.sinks.empty())
        throw InvalidArgument("d_sinks", "there are no sinks to differentiate; give sinks or no d_sinks.");
    if (grads.d_float_mask != nullptr && !p.float_mask.present())
        throw InvalidArgument("d_float_mask", "there is no float mask to differentiate; give float_mask or no "
                                              "d_float_mask.");
    return p;
}

}  // namespace vkattn::detail

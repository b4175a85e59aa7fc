#include "attention_call.hpp"

#include <array>
#include <span>
#include <string_view>
#include <utility>

namespace nb = nanobind;

namespace vkattn::python {
namespace {

template <class Array>
DType dtype_of(const Array& a, const char* name) {
    const nb::dlpack::dtype t = a.dtype();
    if (t == nb::dtype<float>()) return DType::f32;
    if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && t.bits == 16 && t.lanes == 1) return DType::f16;
    if (t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16 && t.lanes == 1) return DType::bf16;
    throw InvalidArgument(name, "its dtype must be float32 or float16.");
}

template <class Pointer, class Array>
BasicTensorView<Pointer> view_of(const Array& a, const char* name) {
    if (a.ndim() != 4) throw InvalidArgument(name, "internal: the binding takes rank-4 views.");
    BasicTensorView<Pointer> view;
    view.data = static_cast<Pointer>(a.data());
    view.dtype = dtype_of(a, name);
    for (int i = 0; i < 4; ++i) {
        view.shape[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
        view.strides[static_cast<std::size_t>(i)] = a.stride(static_cast<std::size_t>(i));
    }
    return view;
}

template <class T>
std::span<const T> span_of(const std::optional<Input>& a) {
    if (!a) return {};
    return {static_cast<const T*>(a->data()), a->size()};
}

MaskView mask_of(const Input& a) {
    MaskView m{a.data(), {}};
    for (std::size_t i = 0; i < a.ndim(); ++i) m.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
    return m;
}

Causal causal_of(const std::string& text) {
    if (text == "none") return Causal::none;
    if (text == "top-left") return Causal::top_left;
    if (text == "bottom-right") return Causal::bottom_right;
    throw InvalidArgument("causal_alignment", "must be \"top-left\" or \"bottom-right\", not \"" + text + "\".");
}

Impl impl_of(const std::string& text) {
    if (text == "auto") return Impl::automatic;
    if (text == "unfused") return Impl::unfused;
    if (text == "fused") return Impl::fused;
    if (text == "split") return Impl::split;
    throw InvalidArgument("impl", "must be \"auto\", \"unfused\", \"fused\" or \"split\", not \"" + text + "\".");
}

// The engine's argument names as scaled_dot_product_attention's.
std::string python_name(const std::string& argument) {
    static constexpr std::pair<std::string_view, std::string_view> names[] = {
        {"q", "query"}, {"k", "key"}, {"v", "value"}, {"o", "out"}, {"bool_mask", "attn_mask"},
        {"float_mask", "attn_mask"}, {"dropout", "dropout_p"}, {"causal_offset", "is_causal"}};
    for (const auto& [engine, python] : names)
        if (argument == engine) return std::string(python);
    return argument;
}

}  // namespace

AttentionOptions options_of(const AttentionCall& c) {
    AttentionOptions options{.scale = c.scale, .causal = causal_of(c.causal), .softcap = c.softcap,
                             .alibi_max_bias = c.alibi_max_bias, .dropout = c.dropout, .seed = c.seed,
                             .impl = impl_of(c.impl)};
    options.window = {c.window_left, c.window_right};
    return options;
}

nb::object report_dict(const AttentionReport& report) {
    nb::dict d;
    d["path"] = to_string(report.path);
    d["variant"] = report.variant;
    d["gpu_ms"] = report.gpu_ms;
    d["flops"] = report.flops;
    return d;
}

void rethrow_with_python_name(const InvalidArgument& e) {
    const std::string message = std::string(e.what()).substr(e.argument().size() + 2);
    throw InvalidArgument(python_name(e.argument()), message);
}

namespace {

// The call's inputs and options, as the engine takes them.
struct Prepared {
    AttentionInputs in;
    AttentionOptions options;
};
Prepared prepared(const AttentionCall& c) {
    Prepared p;
    p.in = {.q = view_of<const void*>(c.q, "q"), .k = view_of<const void*>(c.k, "k"), .v = view_of<const void*>(c.v, "v")};
    p.in.kv_lengths = span_of<std::int32_t>(c.kv_lengths);
    if (c.bool_mask) p.in.bool_mask = mask_of(*c.bool_mask);
    if (c.float_mask) p.in.float_mask = mask_of(*c.float_mask);
    p.in.alibi_slopes = span_of<float>(c.alibi_slopes);
    p.in.sinks = span_of<float>(c.sinks);
    p.options = options_of(c);
    return p;
}

}  // namespace

nb::object run_attention(Context* context, const AttentionCall& c) {
    return python_names([&]() -> nb::object {
        const Prepared p = prepared(c);
        AttentionOutputs out{.o = view_of<void*>(c.out, "o")};
        if (c.lse) out.lse = static_cast<float*>(c.lse->data());
        if (c.weights) out.weights = static_cast<float*>(c.weights->data());
        if (context == nullptr) {
            nb::gil_scoped_release unlocked;
            reference_attention(p.in, out, p.options);
            return nb::none();
        }
        AttentionReport report;
        {
            nb::gil_scoped_release unlocked;
            report = attention(*context, p.in, out, p.options);
        }
        return report_dict(report);
    });
}

nb::object run_attention_backward(Context* context, const AttentionCall& c, const Input& grad_out, const Gradients& g) {
    return python_names([&]() -> nb::object {
        const Prepared p = prepared(c);
        const TensorView d_out = view_of<const void*>(grad_out, "grad_out");
        AttentionGradients grads;
        if (g.dq) grads.dq = view_of<void*>(*g.dq, "dq");
        if (g.dk) grads.dk = view_of<void*>(*g.dk, "dk");
        if (g.dv) grads.dv = view_of<void*>(*g.dv, "dv");
        if (g.d_sinks) grads.d_sinks = static_cast<float*>(g.d_sinks->data());
        if (context == nullptr) {
            nb::gil_scoped_release unlocked;
            reference_attention_backward(p.in, d_out, grads, p.options);
            return nb::none();
        }
        AttentionReport report;
        {
            nb::gil_scoped_release unlocked;
            report = attention_backward(*context, p.in, d_out, grads, p.options);
        }
        return report_dict(report);
    });
}

}  // namespace vkattn::python

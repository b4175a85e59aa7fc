#include "attention_call.hpp"

#include <array>
#include <span>
#include <string_view>
#include <type_traits>
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
    // NumPy has no bfloat16 of its own: the package passes ml_dtypes.bfloat16 arrays as their bits.
    if (t == nb::dtype<std::uint16_t>()) return DType::bf16;
    throw InvalidArgument(name, "its dtype must be float32, float16 or bfloat16.");
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

// The checks the engine cannot make on a raw pointer: the element type, C order and, when given,
// the element count.
template <class T, class Array>
void require(const Array& a, const char* name, std::optional<std::size_t> count = std::nullopt) {
    if (a.dtype() != nb::dtype<T>() || !c_contiguous(a))
        throw InvalidArgument(name, std::string("must be a C-contiguous array of ") +
                                        (std::is_same_v<T, float> ? "float32" : std::is_same_v<T, std::uint8_t> ? "uint8" : "int32") +
                                        ".");
    if (count && a.size() != *count)
        throw InvalidArgument(name, "has " + std::to_string(a.size()) + " elements but must have " + std::to_string(*count) + ".");
}

template <class T>
std::span<const T> span_of(const std::optional<Input>& a, const char* name) {
    if (!a) return {};
    require<T>(*a, name);
    return {static_cast<const T*>(a->data()), a->size()};
}

MaskView mask_of(const Input& a, bool is_bool) {
    if (is_bool) require<std::uint8_t>(a, "bool_mask");
    else require<float>(a, "float_mask");
    MaskView m{a.data(), {}};
    for (std::size_t i = 0; i < a.ndim(); ++i) m.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
    return m;
}

// The rows of a [B, H, N, D] view: B·H·N.
std::size_t rows_of(const TensorView& v) { return static_cast<std::size_t>(v.shape[0] * v.shape[1] * v.shape[2]); }

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

LogitsStage logits_stage_of(const std::string& text) {
    for (const LogitsStage stage : {LogitsStage::scaled, LogitsStage::softcapped, LogitsStage::masked})
        if (text == to_string(stage)) return stage;
    throw InvalidArgument("logits_stage", "must be \"scaled\", \"softcapped\" or \"masked\", not \"" + text + "\".");
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
    options.causal_offset = c.causal_offset;
    options.diagonal_offset = c.diagonal_offset;
    options.diagonal_bottom_right = c.diagonal_bottom_right;
    options.logits_stage = logits_stage_of(c.logits_stage);
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

void require_floats(const Output& array, const char* name, std::size_t count) { require<float>(array, name, count); }
void require_input_floats(const Input& array, const char* name) { require<float>(array, name); }

namespace {

// The call's inputs and options, as the engine takes them.
struct Prepared {
    AttentionInputs in;
    AttentionOptions options;
};
Prepared prepared(const AttentionCall& c) {
    Prepared p;
    p.in = {.q = view_of<const void*>(c.q, "q"), .k = view_of<const void*>(c.k, "k"), .v = view_of<const void*>(c.v, "v")};
    p.in.kv_lengths = span_of<std::int32_t>(c.kv_lengths, "kv_lengths");
    if (c.bool_mask) p.in.bool_mask = mask_of(*c.bool_mask, true);
    if (c.float_mask) p.in.float_mask = mask_of(*c.float_mask, false);
    p.in.alibi_slopes = span_of<float>(c.alibi_slopes, "alibi_slopes");
    p.in.sinks = span_of<float>(c.sinks, "sinks");
    p.options = options_of(c);
    return p;
}

}  // namespace

nb::object run_attention(Context* context, const AttentionCall& c) {
    return python_names([&]() -> nb::object {
        const Prepared p = prepared(c);
        AttentionOutputs out{.o = view_of<void*>(c.out, "o")};
        const std::size_t rows = rows_of(p.in.q);
        if (c.lse) {
            require<float>(*c.lse, "lse", rows);
            out.lse = static_cast<float*>(c.lse->data());
        }
        if (c.weights) {
            require<float>(*c.weights, "weights", rows * static_cast<std::size_t>(p.in.k.shape[2]));
            out.weights = static_cast<float*>(c.weights->data());
        }
        if (c.logits) {
            require<float>(*c.logits, "logits", rows * static_cast<std::size_t>(p.in.k.shape[2]));
            out.logits = static_cast<float*>(c.logits->data());
        }
        AttentionReport report;
        {
            nb::gil_scoped_release unlocked;  // no Python object is touched until it is back
            if (context == nullptr) reference_attention(p.in, out, p.options);
            else report = attention(*context, p.in, out, p.options);
        }
        return context == nullptr ? nb::none() : report_dict(report);
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
        if (g.d_sinks) {
            require<float>(*g.d_sinks, "d_sinks", static_cast<std::size_t>(p.in.q.shape[1]));
            grads.d_sinks = static_cast<float*>(g.d_sinks->data());
        }
        AttentionReport report;
        {
            nb::gil_scoped_release unlocked;  // no Python object is touched until it is back
            if (context == nullptr) reference_attention_backward(p.in, d_out, grads, p.options);
            else report = attention_backward(*context, p.in, d_out, grads, p.options);
        }
        return context == nullptr ? nb::none() : report_dict(report);
    });
}

}  // namespace vkattn::python

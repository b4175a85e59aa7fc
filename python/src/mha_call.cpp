#include "mha_call.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

namespace nb = nanobind;

namespace vkattn::python {
namespace {

std::span<const float> floats(const Input& a, const char* name) {
    require_input_floats(a, name);
    return {static_cast<const float*>(a.data()), a.size()};
}

HostArray host(const Input& a, const char* name) {
    require_input_floats(a, name);
    HostArray h{static_cast<const float*>(a.data()), {}};
    for (std::size_t i = 0; i < a.ndim(); ++i) h.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
    return h;
}

// The layer from the call's parameters (the engine checks every shape and names the key).
MultiHeadAttention layer_of(const MhaCall& c) {
    MhaWeights w;
    auto find = [&](const char* name) -> std::span<const float> {
        const auto it = c.parameters.find(name);
        return it == c.parameters.end() ? std::span<const float>{} : floats(it->second, name);
    };
    w.in_proj_weight = find("in_proj_weight");
    w.q_proj_weight = find("q_proj_weight");
    w.k_proj_weight = find("k_proj_weight");
    w.v_proj_weight = find("v_proj_weight");
    w.in_proj_bias = find("in_proj_bias");
    w.out_proj_weight = find("out_proj.weight");
    w.out_proj_bias = find("out_proj.bias");
    return MultiHeadAttention({.embed_dim = c.embed_dim, .num_heads = c.num_heads, .kdim = c.kdim, .vdim = c.vdim,
                               .bias = c.bias, .batch_first = c.batch_first},
                              w);
}

MhaInputs inputs_of(const MhaCall& c) {
    MhaInputs in{.query = host(c.query, "query")};
    if (c.key) in.key = host(*c.key, "key");
    if (c.value) in.value = host(*c.value, "value");
    auto mask = [](const Input& m, bool is_bool) {
        if (!is_bool) require_input_floats(m, "attn_mask");
        else if (m.dtype() != nb::dtype<std::uint8_t>() || !c_contiguous(m))
            throw InvalidArgument("attn_mask", "a bool mask must be a C-contiguous uint8 array.");
        TorchMask t{m.data(), is_bool, {}};
        for (std::size_t i = 0; i < m.ndim(); ++i) t.shape.push_back(static_cast<std::int64_t>(m.shape(i)));
        return t;
    };
    if (c.key_padding_mask) in.key_padding_mask = mask(*c.key_padding_mask, c.key_padding_mask_bool);
    if (c.attn_mask) in.attn_mask = mask(*c.attn_mask, c.attn_mask_bool);
    return in;
}

MhaOptions options_of(const MhaCall& c) {
    MhaOptions o{.average_attn_weights = c.average_attn_weights, .dropout = c.dropout, .seed = c.seed};
    if (c.impl == "auto") o.impl = Impl::automatic;
    else if (c.impl == "fused") o.impl = Impl::fused;
    else if (c.impl == "unfused") o.impl = Impl::unfused;
    else if (c.impl == "split") o.impl = Impl::split;
    else throw InvalidArgument("impl", "must be \"auto\", \"unfused\", \"fused\" or \"split\", not \"" + c.impl + "\".");
    return o;
}

nb::dict report_of(const MhaReport& r) {
    nb::dict d;
    d["gpu_ms"] = r.gpu_ms;
    d["flops"] = r.flops;
    d["path"] = to_string(r.attention.path);
    d["variant"] = r.attention.variant;
    return d;
}

void copy_into(const std::vector<float>& values, const Output& out, const std::string& name) {
    require_floats(out, name.c_str(), values.size());
    std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
}

}  // namespace

nb::object mha_forward(Context& context, const MhaCall& c, const Output& out, const std::optional<Output>& attn_weights) {
    const MultiHeadAttention layer = layer_of(c);
    const MhaInputs in = inputs_of(c);
    // The outputs' sizes, which the engine cannot check on raw pointers: out the query's with E
    // features; the weights [N, L, S] or [N, H, L, S] (no N unbatched).
    const auto& qs = in.query.shape;
    const auto& ks = in.key.data ? in.key.shape : qs;
    const bool batched = qs.size() == 3;
    const std::int64_t L = qs[batched && c.batch_first ? 1 : 0], S = ks[batched && c.batch_first ? 1 : 0];
    const std::int64_t N = batched ? qs[c.batch_first ? 0 : 1] : 1;
    require_floats(out, "out", static_cast<std::size_t>(N * L * c.embed_dim));
    if (attn_weights)
        require_floats(*attn_weights, "attn_weights",
                       static_cast<std::size_t>(N * (c.average_attn_weights ? 1 : c.num_heads) * L * S));
    const MhaOutputs outputs{.out = static_cast<float*>(out.data()),
                             .attn_weights = attn_weights ? static_cast<float*>(attn_weights->data()) : nullptr};
    const MhaOptions options = options_of(c);
    MhaReport report;
    {
        nb::gil_scoped_release unlocked;
        report = layer.forward(context, in, outputs, options);
    }
    return report_of(report);
}

nb::object mha_backward(Context& context, const MhaCall& c, const Input& grad_out, const Output& d_query,
                        const std::optional<Output>& d_key, const std::optional<Output>& d_value,
                        const std::map<std::string, Output>& d_parameters) {
    const MultiHeadAttention layer = layer_of(c);
    const MhaInputs in = inputs_of(c);
    const MhaOptions options = options_of(c);
    MhaGradients g;
    {
        nb::gil_scoped_release unlocked;
        g = layer.backward(context, in, host(grad_out, "grad_out"), options);
    }
    copy_into(g.query, d_query, "query");
    if (d_key && !g.key.empty()) copy_into(g.key, *d_key, "key");
    if (d_value && !g.value.empty()) copy_into(g.value, *d_value, "value");
    nb::dict which;  // which inputs got a gradient of their own
    which["key"] = !g.key.empty();
    which["value"] = !g.value.empty();
    for (const MhaGradients::Parameter& p : g.parameters) {
        const auto it = d_parameters.find(p.name);
        if (it == d_parameters.end()) throw InvalidArgument(p.name, "internal: no array for this parameter's gradient.");
        copy_into(p.values, it->second, p.name);
    }
    nb::dict result = report_of(g.report);
    result["own_gradient"] = which;
    return result;
}

}  // namespace vkattn::python

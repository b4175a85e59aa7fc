#include "mha_weights.hpp"

#include <set>

#include "vkattn/errors.hpp"

namespace vkattn {
namespace {

// The tensor as fp32 (fp16 and bf16 files are widened; bf16 already was, on load).
std::vector<float> as_f32(const npy::Array& a) {
    std::vector<float> out(static_cast<std::size_t>(a.count()));
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = a.type == npy::ElementType::f16 ? half_to_float(a.as<std::uint16_t>()[i]) : a.as<float>()[i];
    return out;
}

}  // namespace

MhaStateDict mha_from_state_dict(const StateDict& dict, std::int64_t num_heads, bool batch_first) {
    static const std::set<std::string> known{"in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                                             "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    for (const auto& [key, array] : dict.tensors) {
        if (key == "bias_k" || key == "bias_v")
            throw InvalidArgument(dict.source, "holds '" + key + "': layers built with add_bias_kv=True are not supported.");
        if (!known.count(key))
            throw InvalidArgument(dict.source, "holds '" + key + "', which is not an nn.MultiheadAttention state_dict key "
                                               "(expected in_proj_weight or q/k/v_proj_weight, in_proj_bias, "
                                               "out_proj.weight, out_proj.bias).");
        if (array.type != npy::ElementType::f32 && array.type != npy::ElementType::f16)
            throw InvalidArgument(dict.source, "tensor '" + key + "' is " + npy::type_name(array.type) +
                                               "; weights are float32, float16 or bfloat16.");
    }
    const auto out_w = dict.tensors.find("out_proj.weight");
    if (out_w == dict.tensors.end() || out_w->second.shape.size() != 2)
        throw InvalidArgument(dict.source, "needs 'out_proj.weight' of shape [embed_dim, embed_dim]; it tells embed_dim.");
    MhaStateDict m;
    m.config.embed_dim = out_w->second.shape[0];
    m.config.num_heads = num_heads;
    m.config.batch_first = batch_first;
    m.config.bias = dict.tensors.count("in_proj_bias") > 0 || dict.tensors.count("out_proj.bias") > 0;
    const std::int64_t E = m.config.embed_dim;
    if (const auto k = dict.tensors.find("k_proj_weight"); k != dict.tensors.end() && k->second.shape.size() == 2)
        m.config.kdim = k->second.shape[1];
    if (const auto v = dict.tensors.find("v_proj_weight"); v != dict.tensors.end() && v->second.shape.size() == 2)
        m.config.vdim = v->second.shape[1];

    // Each tensor checked for its shape (require names the key), widened to fp32, kept.
    auto take = [&](const std::string& key, std::vector<std::int64_t> shape, std::span<const float>& dst) {
        const auto it = dict.tensors.find(key);
        if (it == dict.tensors.end()) return;
        dict.require(key, it->second.type, shape);
        m.storage.push_back(as_f32(it->second));
        dst = m.storage.back();
    };
    m.storage.reserve(7);  // spans point into it: no reallocation
    const std::int64_t kdim = m.config.kdim ? m.config.kdim : E, vdim = m.config.vdim ? m.config.vdim : E;
    take("in_proj_weight", {3 * E, E}, m.weights.in_proj_weight);
    take("q_proj_weight", {E, E}, m.weights.q_proj_weight);
    take("k_proj_weight", {E, kdim}, m.weights.k_proj_weight);
    take("v_proj_weight", {E, vdim}, m.weights.v_proj_weight);
    take("in_proj_bias", {3 * E}, m.weights.in_proj_bias);
    take("out_proj.weight", {E, E}, m.weights.out_proj_weight);
    take("out_proj.bias", {E}, m.weights.out_proj_bias);
    return m;
}

}  // namespace vkattn

#include "features.hpp"

#include <sstream>

#include "npy.hpp"
#include "parse_integer.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::tool {
namespace {

// "L,R" with each side an integer >= -1 (-1 = unbounded).
Window parse_window(const std::string& text) {
    const auto comma = text.find(',');
    auto side = [&](const std::string& s) {
        const std::optional<std::int64_t> v = parse_integer(s);
        if (!v || *v < -1)
            throw InvalidArgument("--window", "is LEFT,RIGHT with each side a number of keys >= 0 or -1 for "
                                              "unbounded (e.g. --window=4096,0), not \"" + text + "\".");
        return *v;
    };
    if (comma == std::string::npos) side("");  // throws
    return {side(text.substr(0, comma)), side(text.substr(comma + 1))};
}

std::vector<float> per_head_file(const std::string& path, const char* flag) {
    const npy::Array a = npy::read(path);
    if (a.type != npy::ElementType::f32 || a.shape.size() != 1)
        throw InvalidArgument(flag, path + " must be a float32 (<f4) array of shape [Hq], one value per query head.");
    return {a.as<float>(), a.as<float>() + a.count()};
}

}  // namespace

void add_feature_flags(CLI::App& app, FeatureFlags& f) {
    app.add_option("--causal-offset", f.causal_offset,
                   "Causal with an explicit diagonal: key j visible to query i when j <= i + K (turns causal on)");
    app.add_option("--window", f.window,
                   "Sliding window LEFT,RIGHT around the diagonal (-1 = unbounded); write --window=-1,0 for a "
                   "negative first value");
    app.add_option("--softcap", f.softcap, "Logit softcap C > 0: s <- C*tanh(s/C) before the masks");
    auto* max_bias = app.add_option("--alibi-max-bias", f.alibi_max_bias,
                                    "ALiBi with the standard geometric slopes for this maximum bias (8 in BLOOM)");
    app.add_option("--alibi-slopes", f.alibi_slopes, "ALiBi slopes .npy, float32 [Hq]")->excludes(max_bias);
    app.add_option("--sinks", f.sinks, "Attention-sink logits .npy, float32 [Hq] (-inf = none for that head)");
    app.add_option("--dropout", f.dropout, "Dropout probability on the attention weights, in [0, 1)");
    app.add_option("--seed", f.seed, "Dropout seed (Philox key): the same seed drops the same weights");
}

Features load_features(const FeatureFlags& f) {
    Features out;
    out.options.causal_offset = f.causal_offset;
    if (!f.window.empty()) out.options.window = parse_window(f.window);
    out.options.softcap = f.softcap;
    out.options.alibi_max_bias = f.alibi_max_bias;
    out.options.dropout = f.dropout;
    out.options.seed = f.seed;
    if (!f.alibi_slopes.empty()) out.alibi_slopes = per_head_file(f.alibi_slopes, "--alibi-slopes");
    if (!f.sinks.empty()) out.sinks = per_head_file(f.sinks, "--sinks");
    return out;
}

void Features::apply(AttentionOptions& o, AttentionInputs& in) const {
    o.causal_offset = options.causal_offset;
    o.window = options.window;
    o.softcap = options.softcap;
    o.alibi_max_bias = options.alibi_max_bias;
    o.dropout = options.dropout;
    o.seed = options.seed;
    in.alibi_slopes = alibi_slopes;
    in.sinks = sinks;
}

std::string Features::describe() const {
    std::ostringstream s;
    if (options.causal_offset) s << " causal_offset=" << *options.causal_offset;
    if (options.window.bounded()) s << " window=" << options.window.left << ',' << options.window.right;
    if (options.softcap) s << " softcap=" << *options.softcap;
    if (options.alibi_max_bias) s << " alibi_max_bias=" << *options.alibi_max_bias;
    if (!alibi_slopes.empty()) s << " alibi_slopes";
    if (!sinks.empty()) s << " sinks";
    if (options.dropout > 0.0) s << " dropout=" << options.dropout << " seed=" << options.seed;
    const std::string text = s.str();
    return text.empty() ? text : text.substr(1);
}

std::string flag_for(const std::string& argument) {
    if (argument == "bool_mask" || argument == "float_mask") return "--mask";
    if (argument == "o") return "--q";  // the output's shape follows from the inputs
    if (argument == "k_scale" || argument == "v_scale") return "--kv-scale";
    if (argument == "d_sinks") return "--dsinks";
    if (argument == "d_float_mask") return "--mask";  // the mask's gradient
    if (argument.rfind("--", 0) == 0) return argument;
    std::string flag = "--" + argument;
    for (auto& c : flag)
        if (c == '_') c = '-';
    return flag;
}

}  // namespace vkattn::tool

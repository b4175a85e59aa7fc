// The model-feature flags shared by `run` and `bench` (--causal-offset, --window, --softcap,
// --alibi-max-bias / --alibi-slopes, --sinks, --dropout, --seed), and the translation of the
// library's argument names back to the flags a user typed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "vkattn/attention.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::tool {

struct FeatureFlags {
    std::optional<std::int64_t> causal_offset;
    std::string window;  // "L,R"
    std::optional<double> softcap, alibi_max_bias;
    std::string alibi_slopes, sinks;  // .npy paths, float32 [Hq]
    double dropout = 0.0;
    std::uint64_t seed = 0;
};

void add_feature_flags(CLI::App& app, FeatureFlags& flags);

// The flags read and checked: options set, per-head arrays loaded (they outlive the inputs).
struct Features {
    AttentionOptions options;  // causal_offset, window, softcap, alibi_max_bias, dropout, seed
    std::vector<float> alibi_slopes, sinks;

    void apply(AttentionOptions& options, AttentionInputs& inputs) const;
    std::string describe() const;  // "" without features, else e.g. "window=128,-1 softcap=30"
};
Features load_features(const FeatureFlags& flags);

// The flag that sets a library argument: "kv_lengths" -> "--kv-lengths", "bool_mask" -> "--mask".
std::string flag_for(const std::string& argument);

// Runs `body`; an InvalidArgument from the library is rethrown naming the flag instead.
template <class Body>
auto with_flag_names(Body&& body) {
    try {
        return body();
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(flag_for(e.argument()), std::string(e.what()).substr(e.argument().size() + 2));
    }
}

}  // namespace vkattn::tool

// The suite's one Context: validation layer on, outputs poisoned with NaN before every run.
#pragma once

#include <string>
#include <vector>

#include "vkattn/context.hpp"

namespace vkattn::test {

inline ContextOptions test_context_options() {
    ContextOptions o;
    o.validation = true;
    o.poison_outputs = true;
    return o;
}

inline Context& gpu_context() {
    static Context context(test_context_options());
    return context;
}

// All validation messages since the last call, as one string (empty when there were none).
inline std::string take_validation_messages(Context& context) {
    std::string all;
    for (const auto& m : context.validation_messages()) all += m + "\n";
    context.clear_validation_messages();
    return all;
}

}  // namespace vkattn::test

// The suite's one Context: validation layer on (see test_layer_on), outputs poisoned with NaN before
// every run.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/suite_lifetime.hpp"
#include "vkattn/context.hpp"

namespace vkattn::test {

// VKATTN_TEST_LAYER=off runs the suite without the validation layer. On a GPU whose only layer
// predates VK_KHR_cooperative_matrix (Debian 12's 1.3.239, the one the GPU kit carries), the
// cooperative-matrix kernels stay portable while the layer is on; off, the [coopmat] cases run on
// the matrix units through the intrinsics (README, "Environment"). With a layer that knows the
// extension (bench/build_validation_layer.sh's 1.3.283) they run there with the layer on.
// Anything else keeps the layer on.
inline bool test_layer_on() {
    const char* v = std::getenv("VKATTN_TEST_LAYER");
    return v == nullptr || std::string(v) != "off";
}

// VKATTN_TEST_FENCE_TIMEOUT=seconds: how long a submission may run before the suite's contexts call
// it hung (ContextOptions::fence_timeout; the engine's 10 minutes otherwise). Lavapipe compiles a
// kernel when it first dispatches it, inside that wait, and through Mesa 26.1's matrix units a
// D 256 kernel of two row tiles met the 10 minutes (tests/units_on_lavapipe.sh).
inline ContextOptions test_context_options() {
    ContextOptions o;
    o.validation = test_layer_on();
    o.poison_outputs = true;
    const char* fence_wait = std::getenv("VKATTN_TEST_FENCE_TIMEOUT");
    if (const int seconds = fence_wait ? std::atoi(fence_wait) : 0; seconds > 0) o.fence_timeout = std::chrono::seconds(seconds);
    return o;
}

// Made on first use, ended with the run (suite_lifetime.hpp).
inline Context& gpu_context() {
    return suite_object([] { return Context(test_context_options()); });
}

// All validation messages since the last call, as one string (empty when there were none).
inline std::string take_validation_messages(Context& context) {
    std::string all;
    for (const auto& m : context.validation_messages()) all += m + "\n";
    context.clear_validation_messages();
    return all;
}

}  // namespace vkattn::test

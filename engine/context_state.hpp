// What a Context owns, floor by floor: the Runtime (instance, device, kernels, the ring and its
// submissions) at the bottom, and above it what the engine's calls share: the plans made for them
// and the tuner's measured table. The includes point down: the runtime knows neither floor.
#pragma once

#include <filesystem>
#include <memory>

#include "plan/plan_cache.hpp"
#include "runtime.hpp"
#include "tune/table.hpp"

namespace vkattn::detail {

struct PlanState;

struct ContextState {
    explicit ContextState(const ContextOptions& options);
    // On the caller's device (vkattn/vulkan.hpp).
    ContextState(const VulkanDevice& caller, const ContextOptions& options);

    // Members go in reverse order: the plans (whose resources a lost submission may still use join
    // the runtime's graveyard) before the runtime.
    Runtime runtime;
    // Where this device's tuning table lives (empty: no cache directory).
    std::filesystem::path tuning_file;
    // The tuner's winners for this device and driver (tune/table.hpp), loaded at start from beside
    // the pipeline cache; null where there is none, it names another device or driver, or
    // VKATTN_TUNING=off. Replaced by the tuner between runs (not thread-safe against calls).
    std::unique_ptr<TuningTable> tuning;
    // The plans this context made for its host API and device calls, by what they were made for.
    PlanCache plans;

    // The plan for `spec`, from the cache or made with this context's tuning.
    std::shared_ptr<PlanState> plan(const AttentionSpec& spec) { return plans.get(runtime, tuning.get(), spec); }

private:
    void load_tuning();
};

}  // namespace vkattn::detail

// What an AttentionPlan holds: the validated problem, the chosen path, the plan's constant buffers
// (per-head terms, a placeholder for unused bindings) and the programs recorded for the bindings
// it has run on. Shared by the public plan, the host API and the multi-head layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention/path.hpp"
#include "attention/problem.hpp"
#include "plan/program.hpp"
#include "plan/program_cache.hpp"
#include "tensor/storage.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::detail {

class Runtime;
struct BatchState;
struct TuningTable;

struct PlanState {
    // Validates, chooses the path, plans it once over tensors of their own (refusing what cannot
    // fit) and builds the pipelines, with `tuning`'s winners (null: the heuristics). Submits nothing.
    PlanState(Runtime& runtime, const TuningTable* tuning, AttentionSpec spec);

    // Checks the tensors against the plan (InvalidArgument naming the tensor) and appends the
    // path's dispatches over them to `program`.
    void record(Program& program, const DeviceAttentionInputs& inputs, const DeviceAttentionOutputs& outputs) const;
    // Records what every replay of a program needs first (the per-head terms) into the batch.
    void prepare(BatchState& batch) const;
    // Keeps what a program recorded by this plan binds besides the tensors (the plan's constant
    // buffers) alive until the batch's submission completes.
    void keep_constants(BatchState& batch) const;
    // prepare(), then record() into the batch: from the program cached for these tensors' memory when `cache`
    // (built on a miss), else a program of its own; outputs poisoned first when the runtime asks.
    void run(BatchState& batch, const DeviceAttentionInputs& inputs, const DeviceAttentionOutputs& outputs,
             bool cache) const;

    Runtime* runtime;
    AttentionSpec spec;
    Problem problem;
    PathChoice choice;
    AttentionReport report;           // from the planning at creation
    std::uint64_t scratch_bytes = 0;  // the path's scratch at creation (plus lse when not returned)
    std::shared_ptr<Storage> placeholder, head_terms;
    std::vector<float> head_terms_values;
    std::uint64_t head_terms_bytes = 16;

    static constexpr std::size_t kCachedBindings = 8;
    mutable ProgramCache programs{kCachedBindings};
    mutable std::atomic<std::uint64_t> runs{0}, bindings_built{0};
};

// The spec of a call on device tensors (the public AttentionPlan's, and the multi-head layer's).
AttentionSpec spec_of(const DeviceAttentionInputs& inputs, const DeviceAttentionOutputs& outputs,
                      const AttentionOptions& options);

struct PlanAccess {
    static const std::shared_ptr<PlanState>& state(const AttentionPlan& plan) { return plan.state_; }
    static AttentionPlan make(std::shared_ptr<PlanState> state) { return AttentionPlan(std::move(state)); }
};

}  // namespace vkattn::detail

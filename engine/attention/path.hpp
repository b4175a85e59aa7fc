// The attention paths: which one runs (chosen once, from shapes and the device) and a planned run
// of it over tensors laid out as Operands say. Planning (the constructor of a PathRun) checks every
// binding against the device's limits before anything is allocated; record() then adds the path's
// dispatches to a Program, which others may share (the multi-head layer puts its projections
// around them).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "attention/io.hpp"
#include "attention/problem.hpp"
#include "attention/tuning.hpp"
#include "attention/unfused.hpp"

namespace vkattn::detail {

class Program;
class Runtime;
struct TuningTable;

class PathRun {
public:
    virtual ~PathRun() = default;
    // Device scratch record() will allocate, known at planning time.
    virtual std::uint64_t scratch_bytes() const = 0;
    // Records the path's dispatches over the buffers (allocating its scratch in the program),
    // ending with a barrier.
    virtual void record(Program& program, const DeviceBuffers& buffers) = 0;
    // What runs: path, variant, slices and flops (the caller adds times and memory).
    AttentionReport report;
};

// The path and its kernel variants, chosen from the problem, the layouts and the device.
struct PathChoice {
    Impl impl = Impl::unfused;  // unfused, fused or split
    UnfusedConfig unfused;
    FusedConfig fused;
    std::uint32_t splits = 0;  // split-KV's key slices
    UnfusedStages stages = UnfusedStages::all;
    std::string chosen_by = "heuristics";  // AttentionReport::chosen_by
};

// Refuses a forced fused or split path for a request of weights or logits (three stages only): the
// rule choose_path applies, for callers that check before they have a device (the ring).
void check_score_rows_path(const Problem& problem, Impl impl);

// Whether the caller left every choice to the engine: no path, split count or knob forced (the
// tuner's winners apply only then, to the forward and to the backward).
bool nothing_forced(const AttentionOptions& options);

// The path options.impl asks for (or `auto` chooses: the tuner's winner from `tuning` where it has
// one for the problem's bucket and the caller forced nothing, else the heuristics); a `paged` K/V
// needs a fused one. Throws InvalidArgument when it cannot run on this device.
PathChoice choose_path(const Runtime& runtime, const TuningTable* tuning, const Problem& problem,
                       const std::array<std::int64_t, 4>& q_strides, const std::array<std::int64_t, 4>& k_strides,
                       const std::array<std::int64_t, 4>& v_strides, const AttentionOptions& options, bool paged = false);

// The chosen path planned over the operands. Throws ResourceLimit when the problem cannot fit.
std::unique_ptr<PathRun> make_path(Runtime& runtime, const Problem& problem, const PathChoice& choice,
                                   const Operands& operands);

// Refuses a request whose device memory (`needed`, itemised in `what`) exceeds the device's
// largest device-local heap, before anything is allocated: ResourceLimit naming both sizes.
void check_device_memory(const Runtime& runtime, std::uint64_t needed, const std::string& what);

}  // namespace vkattn::detail

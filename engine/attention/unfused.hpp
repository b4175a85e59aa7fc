// The three-stage path: S = scale·Q·Kᵀ (bmm), masked softmax in place (softmax), O = P·V (bmm),
// one dispatch per stage over every batch and head, cut into chunks only where a binding would
// exceed the device's limits.
#pragma once

#include <memory>

#include "attention/io.hpp"
#include "attention/problem.hpp"
#include "attention/tuning.hpp"

namespace vkattn::detail {

class PathRun;
class Runtime;

// How far to run: tests check stage 1 alone by stopping after it (S lands in the weights).
enum class UnfusedStages { all, scores_only };

std::unique_ptr<PathRun> plan_unfused(Runtime& runtime, const Problem& problem, const Operands& operands,
                                      const UnfusedConfig& config, UnfusedStages stages = UnfusedStages::all);

}  // namespace vkattn::detail

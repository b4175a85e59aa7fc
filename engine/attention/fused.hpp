// The fused path (flash.comp): one dispatch over every (batch, key/value head) and query row block;
// and split-KV decoding: the same kernel over key slices, then combine.comp.
#pragma once

#include <memory>

#include "attention/path.hpp"
#include "attention/problem.hpp"
#include "attention/tuning.hpp"

namespace vkattn::detail {

class Runtime;

// splits = 0: the fused path; splits >= 1: split-KV with that many key slices (1 is legal: a
// single slice still goes through the combine kernel, which tests use).
std::unique_ptr<PathRun> plan_fused(Runtime& runtime, const Problem& problem, const AttentionInputs& inputs,
                                    const AttentionOutputs& outputs, const FusedConfig& config, std::uint32_t splits);
AttentionReport run_fused(Runtime& runtime, const Problem& problem, const AttentionInputs& inputs,
                          const AttentionOutputs& outputs, const FusedConfig& config, std::uint32_t splits);

}  // namespace vkattn::detail

// The fused path (flash.comp): one dispatch over every (batch, key/value head) and query row block;
// and split-KV decoding: the same kernel over key slices, then combine.comp.
#pragma once

#include <memory>

#include "attention/path.hpp"

namespace vkattn::detail {

// splits = 0: the fused path; splits >= 1: split-KV with that many key slices (1 is legal: a
// single slice still goes through the combine kernel, which tests use).
std::unique_ptr<PathRun> plan_fused(Runtime& runtime, const Problem& problem, const Operands& operands,
                                    const FusedConfig& config, std::uint32_t splits);

}  // namespace vkattn::detail

// Head parallelism: one attention call spread over several contexts (devices of any vendors, or
// the same device more than once), each running its share of the (batch, K/V head) units in a
// thread of its own, the results landing in the caller's outputs as one call's would.
#pragma once

#include <span>

#include "vkattn/attention.hpp"

namespace vkattn {

// The units b·Hkv + hk are cut into one contiguous run per context (as even as units allow; a
// context gets none when there are fewer units than contexts), each run into blocks of whole batches
// or of one batch's heads, and each block is attention() on its context with
// AttentionOptions::block set, so that masks, lengths, ALiBi, sinks and dropout (the whole's Philox
// numbers) give exactly what one device gives. Every argument is checked before any device work
// (InvalidArgument, as attention's); a device that fails mid-way rethrows its error after every
// thread has finished, with the other devices' shares written. The report: the first block's path
// and variant, gpu_ms the slowest context's (they run at once), flops, slices and device bytes
// summed.
AttentionReport attention(std::span<Context* const> contexts, const AttentionInputs& inputs,
                          const AttentionOutputs& outputs, const AttentionOptions& options = {});

}  // namespace vkattn

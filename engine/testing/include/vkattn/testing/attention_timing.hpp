// Attention timed as a loop over device-resident tensors runs it (a decode loop, a training step,
// PyTorch's own timing loops): the host call's inputs uploaded once, then runs back to back, so that
// the GPU never waits for a host copy between two timed runs. Timing each host call instead
// (vkattn::attention on host memory) leaves the GPU idle while the host uploads Q, K and V and reads
// O back: tens of milliseconds a run at N 4,096 on a discrete GPU, long enough for its clock to fall
// between runs.
#pragma once

#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/testing/benchmark.hpp"

namespace vkattn {
class Context;
}

namespace vkattn::testing {

struct AttentionTiming {
    std::vector<double> samples_ms;  // each timed run's GPU time (its timestamps around the attention)
    int warmup_runs = 0;             // the untimed runs before them
    AttentionReport report;          // the plan's (path, variant, flops), gpu_ms the median
};

// The call's plan (the context's cache, as vkattn::attention takes it), its tensors on the device
// (the host call's temporaries: the same strides, masks and per-sequence lengths), filled once; then
// `warm_up`'s untimed runs and `repeat` timed ones, each one submission waited on; the last run's
// outputs come back into `out` as the host call's do. Throws as vkattn::attention does, and
// InvalidArgument("repeat") below 1.
AttentionTiming time_attention(Context& context, const AttentionInputs& in, const AttentionOutputs& out,
                               const AttentionOptions& options, const WarmUp& warm_up, int repeat);

// The backward pass alike: the host backward call's tensors (vkattn::attention_backward's: the
// inputs, grad_out, the gradients) filled and the forward (o, lse) run once; then the backward alone,
// run after run (it reads o and lse and writes the gradients whole, so every run computes the same);
// the last run's gradients come back into `grads`. The report is the backward's.
AttentionTiming time_attention_backward(Context& context, const AttentionInputs& in, const TensorView& grad_out,
                                        const AttentionGradients& grads, const AttentionOptions& options,
                                        const WarmUp& warm_up, int repeat);

}  // namespace vkattn::testing

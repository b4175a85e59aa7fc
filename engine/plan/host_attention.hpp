// The device side of a host attention call (vkattn::attention on host memory): the call checked, its
// plan (the context's cache), its tensors as the host call's temporaries (HostTensors). The host call
// records upload, run and download in one submission; testing::time_attention uploads once and runs
// the plan's cached program run after run.
#pragma once

#include <cstdint>
#include <memory>

#include "attention/problem.hpp"
#include "plan/host_tensors.hpp"
#include "vkattn/plan.hpp"

namespace vkattn {
class Context;
}

namespace vkattn::detail {

struct PlanState;

class HostAttention {
public:
    // Checks the call and the device memory it needs; allocates nothing.
    HostAttention(Context& context, const AttentionInputs& in, const AttentionOutputs& out, const AttentionOptions& options);
    HostAttention(const HostAttention&) = delete;  // the temporaries point into it
    HostAttention& operator=(const HostAttention&) = delete;
    // Allocates the device tensors and fills the inputs.
    void upload(BatchState& state);
    // Records the attention over them: from the program the plan caches for their memory where `cache`.
    void record(BatchState& state, bool cache) const;
    // The outputs back into the caller's views when the submission completes.
    void download(BatchState& state);
    // The plan's report with the host's flops (it knows the key lengths) and the device memory used.
    AttentionReport report() const;

private:
    Problem problem_;
    Runtime* runtime_;
    std::shared_ptr<const PlanState> plan_;
    HostTensors host_;
    DeviceAttentionInputs device_in_;
    DeviceAttentionOutputs device_out_;
};

}  // namespace vkattn::detail

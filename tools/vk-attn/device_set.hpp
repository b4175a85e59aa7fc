// The --devices flag of run and bench: one attention call over several devices (head parallelism,
// vkattn/multi_device.hpp), a context per listed device; a device may be listed more than once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"

namespace vkattn::tool {

class DeviceSet {
public:
    // `list`: "0,1,..." (indices or name substrings, as --device takes); empty: `single` alone.
    DeviceSet(const std::string& list, Context& single);
    bool several() const { return contexts_.size() > 1; }
    std::string describe() const;  // "2 devices: <name>, <name>"
    AttentionReport attention(const AttentionInputs& in, const AttentionOutputs& out, const AttentionOptions& options) const;

private:
    std::vector<std::unique_ptr<Context>> owned_;
    std::vector<Context*> contexts_;
};

}  // namespace vkattn::tool

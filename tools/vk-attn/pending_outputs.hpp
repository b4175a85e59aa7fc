// All-or-nothing output files: every output is written to a temporary name first, then all are
// renamed into place, so a failure part-way never leaves some outputs new and others stale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vkattn::tool {

struct PendingOutput {
    std::string path;
    std::vector<std::int64_t> shape;
    const float* data;
};

void write_all(const std::vector<PendingOutput>& outputs);

}  // namespace vkattn::tool

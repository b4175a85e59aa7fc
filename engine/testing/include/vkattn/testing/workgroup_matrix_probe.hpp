// The workgroup-matrix probe (shaders/cm2_probe.comp; issue #33): each VK_NV_cooperative_matrix2
// operation the workgroup-matrix kernels rely on (a tensor load through a transposed view, plain,
// clamped and at an offset; row reductions into 16 columns and back; element operations that read
// their row and column; an accumulator converted to an operand; a tile staged in shared memory
// loaded row- and column-major), run alone on exact values and
// compared with what it must give. Where a workgroup-matrix kernel computes wrong on a GPU, this
// says which operation did.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vkattn {
class Context;
}

namespace vkattn::testing {

struct WorkgroupMatrixCheck {
    std::string name;            // what the operation is
    std::int64_t elements = 0;   // compared
    std::int64_t mismatches = 0;
    std::int64_t first = -1;     // the first mismatch's (row · columns + column), -1 for none
    float got = 0, want = 0;     // there
};

// One dispatch of the probe and the checks of its eleven results; nullopt where the context's device
// does not run workgroup-scope matrices (DeviceInfo::workgroup_matrices), or offers them at no
// workgroup size whose granularity takes the probe's 64 x 64 matrices and 16-column row values.
std::optional<std::vector<WorkgroupMatrixCheck>> probe_workgroup_matrices(Context& context);

}  // namespace vkattn::testing

// `--kernel-statistics`: what the driver's compiler made of every kernel a command built (registers,
// spills, shared memory; vkattn/kernel_statistics.hpp), after the command's own output.
#pragma once

#include <ostream>

#include "output_table.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {

// JSON: one object per kernel executable {"kernel", "constants", "executable", "subgroup_size",
// "statistics": {name: value}}; otherwise a line per kernel. A device that captures none gets a
// note on stderr.
void print_kernel_statistics(Context& context, Format format, std::ostream& out);

}  // namespace vkattn::tool

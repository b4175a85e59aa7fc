// --plot: GFLOP/s against sequence length, one line per implementation (and dtype, causal), drawn
// by a small matplotlib script that ships inside the tool.
#pragma once

#include <string>
#include <vector>

#include "output_table.hpp"

namespace vkattn::tool {

// Writes `rows` (bench points) as CSV and renders them to `png`. Throws vkattn::InvalidArgument
// naming --plot when python3 or matplotlib is missing or the script fails.
void plot_gflops(const std::vector<Row>& rows, const std::string& png, double gemm_gflops);

}  // namespace vkattn::tool

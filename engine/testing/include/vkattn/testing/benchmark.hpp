// Measuring: GPU time from timestamp queries, after warm-up, as the median and spread of repeats.
// The GEMM ceiling uses the engine's own tiled matrix shader, so attention figures can be quoted as
// a fraction of what this device reaches on a plain matrix product.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vkattn {
class Context;
}

namespace vkattn::testing {

struct Timing {
    double median_ms = 0, min_ms = 0, max_ms = 0;
};

// Median, min and max of samples (milliseconds).
Timing summarize(std::vector<double> samples_ms);

struct GemmResult {
    std::int64_t m = 0, n = 0, k = 0;
    Timing time;
    double gflops = 0;        // 2·m·n·k / median
    std::string variant;
    double rel_l2_err = -1;  // ‖C − ref‖₂ / ‖ref‖₂ over sampled rows of a double-precision product; -1 if not validated
};

// C[m×n] = A[m×k] · B[k×n] in fp32 on random data.
GemmResult benchmark_gemm(Context& context, std::int64_t m, std::int64_t n, std::int64_t k, int warmup,
                          int repeat, bool validate);

}  // namespace vkattn::testing

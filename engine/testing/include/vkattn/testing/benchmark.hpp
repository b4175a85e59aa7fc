// Measuring: GPU time from timestamp queries, after warm-up, as the median and spread of repeats.
// The GEMM ceiling uses the engine's own tiled matrix shader, so attention figures can be quoted as
// a fraction of what this device reaches on a plain matrix product; the copy ceiling, byte rates
// as a fraction of what a copy reaches.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "vkattn/attention.hpp"

namespace vkattn {
class Context;
}

namespace vkattn::testing {

struct Timing {
    double median_ms = 0, min_ms = 0, max_ms = 0;
};

// Median, min and max of samples (milliseconds).
Timing summarize(std::vector<double> samples_ms);

// The untimed runs before a measurement: at least `runs`, and then more until `ms` milliseconds of
// wall time have passed after the first (which uploads and builds the pipelines). A GPU idle a
// moment ago runs at a fraction of its clock until it has been kept busy a while (an H200 sat at
// 345 MHz after sub-millisecond points, docs/PERFORMANCE.md), so a fixed count of a short kernel's
// runs measures the ramp; a time keeps every point's warm-up alike.
struct WarmUp {
    WarmUp(int runs_ = 2, double ms_ = 0) : runs(runs_), ms(ms_) {}
    int runs;
    double ms;
    // Whether another untimed run is due after `done` of them, the first of which ended at `first_end`.
    bool wants_more(int done, std::chrono::steady_clock::time_point first_end) const {
        if (done < runs) return true;
        if (ms <= 0) return false;
        return done == 0 || std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_end).count() < ms;
    }
};

struct GemmResult {
    std::int64_t m = 0, n = 0, k = 0;
    Timing time;
    double gflops = 0;        // 2·m·n·k / median
    std::string variant;
    double rel_l2_err = -1;  // ‖C − ref‖₂ / ‖ref‖₂ over sampled rows of a double-precision product; -1 if not validated
};

// C[m×n] = A[m×k] · B[k×n] on random data, with the products' kernel the tuning's or the one
// `overrides` asks for (gemm_kernel and the cooperative-matrix kernel's gemm_shape, or bmm.comp's
// knobs). A and B are fp32, or `coopmat_operands` (f16, as cuBLAS hgemm reads them, or bf16) for
// the cooperative-matrix kernel (rounded on the host, so that the reference multiplies the same
// values); C is fp32.
GemmResult benchmark_gemm(Context& context, std::int64_t m, std::int64_t n, std::int64_t k, const WarmUp& warmup,
                          int repeat, bool validate, const VariantOverrides& overrides = {},
                          DType coopmat_operands = DType::f16);

struct CopyResult {
    std::uint64_t bytes = 0;
    Timing time;             // the shader copy (copy.comp)
    double gbps = 0;         // bytes / median: each byte is read once and written once
    Timing transfer_time;    // vkCmdCopyBuffer of the same bytes
    double transfer_gbps = 0;
    std::string variant;     // the shader copy's grid
    bool valid = true;       // with validation: both copies left the destination holding the source
    // What the device's memory moves: the faster of the two (the shader copy on a GPU; on lavapipe
    // the transfer, a memcpy, beats a shader's lane-by-lane loads). Byte rates are quoted against it.
    double ceiling_gbps() const { return gbps > transfer_gbps ? gbps : transfer_gbps; }
};

// The bandwidth ceiling: `bytes` (a multiple of 16) copied between two device buffers by a compute
// shader with 16-byte loads, several in flight per invocation, over a grid that fills the device
// (the memory's rate), and by vkCmdCopyBuffer (a copy engine's rate, often far lower on a discrete
// GPU), both timed like attention. A decode's K/V read rate is quoted against the shader copy.
CopyResult benchmark_copy(Context& context, std::uint64_t bytes, const WarmUp& warmup, int repeat, bool validate);

}  // namespace vkattn::testing

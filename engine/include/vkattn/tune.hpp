// The tuner (issue #32): times every catalogued variant (vkattn/variants.hpp) that can run each shape
// of a grid on this context's device, on random inputs, checks each one's output against the
// heuristics' choice on the same inputs, keeps the fastest that agrees per bucket of problems, writes the winners
// beside the pipeline cache (one table per device UUID and driver) and uses them from then on: a call
// that forces nothing runs its bucket's winner, and its report says chosen_by "tuning". A backward
// shape does the same for attention_backward's variants and gradients, under buckets of its own. Another
// device's or driver's table is ignored; VKATTN_TUNING=off ignores every table (the heuristics
// alone). `vk-attn tune` is its command.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"

namespace vkattn {

struct TuneShape {
    std::int64_t B = 1, Hq = 8, Hkv = 8, Nq = 1024, Nkv = 1024, D = 64;
    DType dtype = DType::f32;  // q's, o's, k's and v's
    bool causal = false;       // bottom-right
    bool backward = false;     // time attention_backward's variants (vkattn/variants.hpp's backward_variants)
    std::string describe() const;
};

// The default grid: decode steps (Hq 32, Hkv 8, Nq 1, 4,096 and 32,768 keys), prefill (H 32, N 1,024
// and 4,096, causal or not) and training's backward (H 32, N 4,096, causal or not), at D 64 and 128,
// in f32 and (where the device stores it) f16, and bf16 where the matrix units take bf16
// (DeviceInfo::bf16_matrix_units: there only the tuner hands bf16 calls to the units' kernels,
// which the heuristics leave off until a GPU validates them). Sized for GPUs; a CPU device takes
// minutes per shape.
std::vector<TuneShape> default_tune_grid(const Context& context);

struct TuneOptions {
    std::vector<TuneShape> shapes;  // empty: default_tune_grid
    // The catalogued variants to time, forward (kernel_variants) and backward (backward_variants)
    // alike; a catalogue none of whose variants is named times all of its own.
    std::vector<std::string> variants;
    int warmup = 2, repeat = 5;     // untimed runs, then timed ones (the median counts)
    bool save = true;               // write the table (merged into this device's) and use it from now on
    // How far (relative L2) a candidate's output may lie from the heuristics' choice on the same
    // random inputs before it is rejected, never a winner however fast; 0: the default for the
    // storage type (fp32 1e-4; f16 3e-3 and bf16 4e-3, their rounding; 16-bit products at least 3e-3).
    double agreement = 0;
};

struct TuneResult {
    TuneShape shape;
    std::string bucket;  // the problems that share its winner
    std::vector<std::pair<std::string, double>> timings;  // variant, median GPU ms (those that ran)
    // Variants whose output disagreed with the heuristics' choice (TuneOptions::agreement), with
    // their relative L2 distance from it: timed, listed, never the winner.
    std::vector<std::pair<std::string, double>> rejected;
    std::string winner;
};

struct TuneReport {
    std::vector<TuneResult> results;
    std::string table_file;  // where the table was written (empty: not saved, or no cache directory)
};

TuneReport tune(Context& context, const TuneOptions& options = {});

}  // namespace vkattn

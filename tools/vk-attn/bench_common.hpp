// What vk-attn bench's parts share (bench.cpp: the flags and the sweep of points; bench_backward.cpp:
// a --backward point; bench_ring.cpp: --context-parallel): the options, a point, its columns.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "context_parallel.hpp"
#include "features.hpp"
#include "kv_storage.hpp"
#include "output_table.hpp"
#include "vkattn/testing/benchmark.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {

struct BenchOptions {
    std::vector<std::int64_t> batch{1}, heads{8}, seq{1024}, dim{64};
    std::int64_t kv_heads = 0, kv_seq = 0, dim_v = 0;  // 0: same as heads / seq / dim
    bool causal = false;
    int repeat = 10, warmup = 2;
    double warmup_ms = -1;          // and untimed runs until this much wall time has passed (-1: kWarmUpMs on a GPU)
    std::string inputs = "device";  // device: uploaded once, runs back to back; host: each run a host call
    bool validate = false;
    std::string dtype = "f32", layout = "bhnd", impl = "auto", device, devices;
    KvStorageFlags storage;             // K's and V's type (empty: --dtype) and fp8 scales
    std::string shared_tiles = "auto";  // on / off: force the shared-memory variants
    std::string texel_loads = "auto";   // on / off: force texel or word loads
    std::string fused_kernel = "auto";  // flash / decode / tile: force the fused path's kernel
    std::string gemm_kernel = "auto";   // blocks / tile: force the products' kernel
    std::string gemm_shape;             // coopmat's GemmShape, e.g. 2x2,4x4,32,2 (empty: the chosen)
    std::string gemm_operands = "f16";  // coopmat's A and B: f16 or bf16
    std::string variant;                // a catalogued variant (vkattn/variants.hpp): its path and knobs
    bool gemm = false;
    std::int64_t gemm_size = 2048;
    bool copy = false;
    std::int64_t copy_mib = 64;
    bool backward = false;  // time the backward pass (and forward + backward)
    bool context_parallel = false, zigzag = false;  // one rank of an MPI job: ring attention
    bool json = false, csv = false;
    bool kernel_statistics = false;  // print the compiler's statistics of every kernel built, at the end
    std::string plot;
    FeatureFlags features;
};

// "256,1024,4096" or "256:4096:x2" (geometric) or "64:256:+64" (arithmetic).
std::vector<std::int64_t> parse_sweep(const std::string& text, const std::string& flag);

struct Point {
    std::int64_t B, Hq, Hkv, Nq, Nkv, Dk, Dv;
};

// A point's shape, mask and timing columns (every row of a point has them in this order).
void add_point(Row& r, const Point& p, bool causal, const std::string& feature_text, const testing::Timing& t);

// --warmup-ms's default on a GPU: long enough for a GPU's clock to leave its idle state. A CPU (lavapipe)
// runs at its clock from the first run, and a run there takes milliseconds to seconds, so --warmup alone.
constexpr double kWarmUpMs = 200;

// The untimed runs the flags ask for (--warmup, --warmup-ms) on the context's device.
inline testing::WarmUp warm_up_of(const BenchOptions& o, Context& context) {
    return {o.warmup, o.warmup_ms >= 0 ? o.warmup_ms : context.device().type == "cpu" ? 0.0 : kWarmUpMs};
}

// Untimed calls of `run` as `warm_up` asks (the host-call timings, which testing::time_attention's
// loop does not time); returns how many.
template <class Run>
int warm_up_calls(const testing::WarmUp& warm_up, Run&& run) {
    int done = 0;
    std::chrono::steady_clock::time_point since;
    for (; warm_up.wants_more(done, since); ++done) {
        run();
        if (done == 0) since = std::chrono::steady_clock::now();
    }
    return done;
}

// The clock the device's shaders ran at right after a point's timed runs (testing::shader_clock_mhz):
// sm_mhz, where the device can read it.
void add_shader_clock(Row& r, Context& context);

// One point of --backward: the forward's and the backward's median GPU times, the backward's GFLOP/s
// (and its ratio to the GEMM ceiling); with --validate the gradients against the reference first.
// False when the validation failed.
bool run_backward_point(Context& context, const BenchOptions& o, const Point& p, const AttentionInputs& in,
                        const AttentionOptions& options, DType dtype, Layout layout, std::mt19937& rng,
                        const std::string& feature_text, double ceiling, Printer& printer, std::vector<Row>& plotted,
                        bool progress_bar);

// --context-parallel: this process is one rank; each point's sequence is sharded over the ranks,
// each rank generating its own shard, and ring attention runs `repeat` times after `warmup`. Rank 0
// prints a row per point: the median step, its compute and the wait for the transfer after it, the
// transfer alone (the same bytes passed round without compute), the fraction of the transfers' time
// in flight that the compute covered (over every rank and step), the bytes each rank sent per step,
// and GFLOP/s over the slowest rank's ring. With --backward the forward runs once (its o and lse)
// and the ring's backward is timed: K/V and the dK/dV accumulators travel, GFLOP/s the backward's.
int run_ring_bench(const BenchOptions& o, const std::vector<std::string>& sweeps, const ContextParallel& cp);

}  // namespace vkattn::tool

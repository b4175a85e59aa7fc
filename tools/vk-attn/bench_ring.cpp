// vk-attn bench --context-parallel: ring attention over MPI ranks (bench_common.hpp).
#include <algorithm>
#include <iostream>
#include <random>

#include "bench_common.hpp"
#include "device_set.hpp"
#include "parse_impl.hpp"
#include "parse_integer.hpp"
#include "plot.hpp"
#include "vkattn/testing/random.hpp"

namespace vkattn::tool {

// --context-parallel: this process is one rank; each point's sequence is sharded over the ranks,
// each rank generating its own shard, and ring attention runs `repeat` times after `warmup`. Rank 0
// prints a row per point: the median step, its compute and the wait for the transfer after it, the
// transfer alone (the same bytes passed round without compute), the fraction of the transfers' time
// in flight that the compute covered (over every rank and step), the bytes each rank sent per step,
// and GFLOP/s over the slowest rank's ring. With --backward the forward runs once (its o and lse)
// and the ring's backward is timed: K/V and the dK/dV accumulators travel, GFLOP/s the backward's.
int run_ring_bench(const BenchOptions& o, const std::vector<std::string>& sweeps, const ContextParallel& cp) {
    for (const auto& [given, flag] : {std::pair{!o.devices.empty(), "--devices"},
                                      std::pair{o.gemm, "--gemm"}, std::pair{o.copy, "--copy"},
                                      std::pair{o.validate, "--validate"}, std::pair{!o.plot.empty(), "--plot"}})
        if (given) throw InvalidArgument(flag, "is not taken with --context-parallel.");
    const DType dtype = dtype_from_string(o.dtype, "--dtype");
    const KvStorage storage = load_kv_storage(o.storage, dtype);
    if (o.backward && storage.dtype != DType::f32 && storage.dtype != DType::f16 && storage.dtype != DType::bf16)
        throw InvalidArgument("--kv-dtype", "the backward pass trains float k and v (f32, f16, bf16), not " +
                                                to_string(storage.dtype) + ".");
    const Features features = load_features(o.features);
    ContextOptions copts;
    copts.device = o.device;
    Context context(copts);
    if (cp.rank() == 0)
        std::cerr << "ring attention over " << cp.ranks() << " ranks" << (o.zigzag ? " (zigzag)" : "") << "; rank 0 on "
                  << context.device().name << "\n";
    Printer printer(std::cout, o.json ? Format::json : o.csv ? Format::csv : Format::table);
    std::mt19937 rng(42 + static_cast<unsigned>(cp.rank()));
    for (auto B : parse_sweep(sweeps[0], "--batch"))
        for (auto H : parse_sweep(sweeps[1], "--heads"))
            for (auto N : parse_sweep(sweeps[2], "--seq"))
                for (auto D : parse_sweep(sweeps[3], "--dim")) {
                    const std::int64_t Hkv = o.kv_heads ? o.kv_heads : H, Dv = o.dim_v ? o.dim_v : D;
                    std::int64_t n = 0;
                    for (const npy::RowRange& r : cp.rows_of(cp.rank(), N)) n += r.length;
                    check_block_dims(storage.dtype, D, Dv);
                    const std::vector<float> scales = head_scales(storage, Hkv);
                    const testing::HostTensor q = testing::random_tensor(rng, dtype, Layout::bhnd, {B, H, n, D});
                    const testing::HostTensor k = testing::random_tensor(rng, storage.dtype, Layout::bhnd, {B, Hkv, n, D}, 1.0f, scales);
                    const testing::HostTensor v = testing::random_tensor(rng, storage.dtype, Layout::bhnd, {B, Hkv, n, Dv}, 1.0f, scales);
                    testing::HostTensor out = testing::nan_tensor(dtype, Layout::bhnd, {B, H, n, Dv});
                    AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
                    in.k_scale = in.v_scale = scales;
                    AttentionOptions options{.causal = o.causal ? Causal::top_left : Causal::none, .impl = parse_impl(o.impl)};
                    features.apply(options, in);
                    // --backward: the forward once (its o and lse), then the backward timed.
                    std::vector<float> lse(static_cast<std::size_t>(B * H * n));
                    const testing::HostTensor grad_out =
                        o.backward ? testing::random_tensor(rng, dtype, Layout::bhnd, {B, H, n, Dv}) : testing::HostTensor{};
                    testing::HostTensor dq, dk, dv;
                    if (o.backward) {
                        dq = testing::nan_tensor(dtype, Layout::bhnd, q.shape);
                        dk = testing::nan_tensor(storage.dtype, Layout::bhnd, k.shape);
                        dv = testing::nan_tensor(storage.dtype, Layout::bhnd, v.shape);
                    }
                    if (o.backward) cp.attention(context, in, {.o = out.mutable_view(), .lse = lse.data()}, options);
                    const auto run_once = [&] {
                        if (!o.backward) return cp.attention(context, in, {.o = out.mutable_view()}, options);
                        return cp.backward(context, in, out.view(), lse, grad_out.view(),
                                           {.dq = dq.mutable_view(), .dk = dk.mutable_view(), .dv = dv.mutable_view()}, options);
                    };
                    for (int w = 0; w < o.warmup; ++w) run_once();
                    std::vector<double> steps, totals;
                    RingRun last;
                    double compute = 0.0, wait = 0.0, in_flight = 0.0, hidden = 0.0;
                    for (int r = 0; r < o.repeat; ++r) {
                        last = run_once();
                        steps.push_back(last.step_ms);
                        totals.push_back(cp.max(last.total_ms));  // the ring ends with its slowest rank
                        compute += last.compute_ms / o.repeat;
                        wait += last.wait_ms / o.repeat;
                        in_flight += last.transfer_ms;
                        hidden += last.hidden_ms;
                    }
                    in_flight = cp.sum(in_flight);
                    hidden = cp.sum(hidden);
                    // K and V; the backward's dK and dV accumulators too (fp32).
                    const std::uint64_t step_bytes =
                        storage_bytes(storage.dtype, B * Hkv * n * D) + storage_bytes(storage.dtype, B * Hkv * n * Dv) +
                        (o.backward ? static_cast<std::uint64_t>(4 * B * Hkv * n * (D + Dv)) : 0);
                    const double transfer = cp.ranks() > 1 ? cp.transfer_ms(step_bytes) : 0.0;
                    const double flops = cp.sum(last.flops);
                    // The forward transfers in P - 1 steps; the backward in P (the accumulators' hop home).
                    const double steps_with_transfer = std::max(1, o.backward ? cp.ranks() : cp.ranks() - 1);
                    const double wait_per_step = cp.max(wait) / steps_with_transfer;
                    const testing::Timing t = testing::summarize(totals);
                    if (cp.rank() != 0) continue;
                    Row row;
                    row.add("impl", std::string(o.backward ? "ring_backward" : "ring"));
                    row.add("ranks", static_cast<std::int64_t>(cp.ranks()));
                    row.add("sharding", std::string(o.zigzag ? "zigzag" : "contiguous"));
                    row.add("batch", B);
                    row.add("heads", H);
                    row.add("kv_heads", Hkv);
                    row.add("seq", N);
                    row.add("dim", D);
                    row.add("causal", std::string(o.causal ? "yes" : "no"));
                    row.add("ring_ms", t.median_ms);
                    row.add("step_ms", testing::summarize(steps).median_ms);
                    row.add("compute_ms", compute / cp.ranks());
                    row.add("wait_ms", wait_per_step);
                    row.add("transfer_ms", transfer);
                    row.add("hidden", in_flight > 0 ? hidden / in_flight : 1.0);
                    row.add("mib_sent_per_step", static_cast<double>(step_bytes) / (1 << 20));
                    row.add("gflops", flops / (t.median_ms * 1e6));
                    row.add("blocks_run", static_cast<std::int64_t>(last.blocks_run));
                    row.add("blocks_skipped", static_cast<std::int64_t>(last.blocks_skipped));
                    printer.print(row);
                }
    if (cp.rank() == 0) printer.finish();
    return 0;
}

}  // namespace vkattn::tool

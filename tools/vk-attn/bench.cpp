// vk-attn bench: time attention with GPU timestamps (median of repeats after warm-up), report
// GFLOP/s = 2·(Dk+Dv) per visible query-key pair / t (4·B·Hq·Nq·Nkv·D without masks, about half
// causal, N·window with a sliding window: AttentionReport::flops) and the
// effective bandwidth of the unavoidable traffic (Q, K, V read once, O written once); with --gemm,
// the device's GEMM ceiling measured in the same run and every figure's ratio to it; with --copy, the
// bandwidth ceiling (a shader copy in 16-byte words; vkCmdCopyBuffer's rate beside it as
// transfer_gbps) and each point's K/V bytes per second against the faster of the two (kv_vs_copy). --validate checks
// each point's first run against the CPU reference before it is timed (vkattn/testing/compare.hpp's rule;
// rel_l2_err = ‖o − ref‖₂ / ‖ref‖₂). With --backward each point times the backward pass alone (GFLOP/s
// = 2·(3·Dk + 2·Dv) per visible pair: its five matrix products) and reports forward + backward too;
// --validate then compares dQ, dK, dV (and the sinks' gradient) with the CPU reference's.
#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>
#include <unistd.h>

#include "commands.hpp"
#include "context_parallel.hpp"
#include "device_set.hpp"
#include "features.hpp"
#include "kv_storage.hpp"
#include "output_table.hpp"
#include "parse_integer.hpp"
#include "parse_impl.hpp"
#include "plot.hpp"
#include "vkattn/testing/benchmark.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

struct BenchOptions {
    std::vector<std::int64_t> batch{1}, heads{8}, seq{1024}, dim{64};
    std::int64_t kv_heads = 0, kv_seq = 0, dim_v = 0;  // 0: same as heads / seq / dim
    bool causal = false;
    int repeat = 10, warmup = 2;
    bool validate = false;
    std::string dtype = "f32", layout = "bhnd", impl = "auto", device, devices;
    KvStorageFlags storage;             // K's and V's type (empty: --dtype) and fp8 scales
    std::string shared_tiles = "auto";  // on / off: force the shared-memory variants
    std::string texel_loads = "auto";   // on / off: force texel or word loads
    std::string fused_kernel = "auto";  // flash / decode / tile: force the fused path's kernel
    std::string gemm_kernel = "auto";   // blocks / tile: force the products' kernel
    std::string variant;                // a catalogued variant (vkattn/variants.hpp): its path and knobs
    bool gemm = false;
    std::int64_t gemm_size = 2048;
    bool copy = false;
    std::int64_t copy_mib = 64;
    bool backward = false;  // time the backward pass (and forward + backward)
    bool context_parallel = false, zigzag = false;  // one rank of an MPI job: ring attention
    bool json = false, csv = false;
    std::string plot;
    FeatureFlags features;
};

// "256,1024,4096" or "256:4096:x2" (geometric) or "64:256:+64" (arithmetic).
std::vector<std::int64_t> parse_sweep(const std::string& text, const std::string& flag) {
    std::vector<std::int64_t> out;
    auto number = [&](const std::string& s) {
        const std::optional<std::int64_t> v = parse_integer(s);
        if (!v || *v < 1) throw InvalidArgument(flag, "\"" + s + "\" is not a positive integer.");
        return *v;
    };
    if (const auto colon = text.find(':'); colon != std::string::npos) {
        const auto second = text.find(':', colon + 1);
        if (second == std::string::npos || second + 2 > text.size())
            throw InvalidArgument(flag, "a range is FROM:TO:xFACTOR or FROM:TO:+STEP, not \"" + text + "\".");
        const std::int64_t from = number(text.substr(0, colon)), to = number(text.substr(colon + 1, second - colon - 1));
        const char kind = text[second + 1];
        const std::int64_t step = number(text.substr(second + 2));
        if ((kind != 'x' && kind != '+') || (kind == 'x' && step < 2))
            throw InvalidArgument(flag, "a range step is xFACTOR (FACTOR >= 2) or +STEP, not \"" + text.substr(second + 1) + "\".");
        for (std::int64_t v = from; v <= to; v = kind == 'x' ? v * step : v + step) out.push_back(v);
        return out;
    }
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) out.push_back(number(item));
    if (out.empty()) throw InvalidArgument(flag, "no values given.");
    return out;
}

struct Point {
    std::int64_t B, Hq, Hkv, Nq, Nkv, Dk, Dv;
};

// A point's shape, mask and timing columns (every row of a point has them in this order).
void add_point(Row& r, const Point& p, bool causal, const std::string& feature_text, const testing::Timing& t) {
    r.add("batch", p.B);
    r.add("heads", p.Hq);
    r.add("kv_heads", p.Hkv);
    r.add("seq_q", p.Nq);
    r.add("seq_kv", p.Nkv);
    r.add("dim", p.Dk);
    r.add("dim_v", p.Dv);
    r.add("causal", causal);
    if (!feature_text.empty()) r.add("features", feature_text);
    r.add("median_ms", t.median_ms);
    r.add("min_ms", t.min_ms);
    r.add("max_ms", t.max_ms);
}

// One point of --backward: the forward's and the backward's median GPU times, the backward's GFLOP/s
// (and its ratio to the GEMM ceiling); with --validate the gradients against the reference first.
// False when the validation failed.
bool run_backward_point(Context& context, const BenchOptions& o, const Point& p, const AttentionInputs& in,
                        const AttentionOptions& options, DType dtype, Layout layout, std::mt19937& rng,
                        const std::string& feature_text, double ceiling, Printer& printer, std::vector<Row>& plotted,
                        bool progress_bar) {
    const testing::HostTensor grad_out = testing::random_tensor(rng, dtype, layout, {p.B, p.Hq, p.Nq, p.Dv});
    testing::HostTensor dq = testing::nan_tensor(dtype, layout, {p.B, p.Hq, p.Nq, p.Dk});
    testing::HostTensor dk = testing::nan_tensor(in.k.dtype, layout, {p.B, p.Hkv, p.Nkv, p.Dk});
    testing::HostTensor dv = testing::nan_tensor(in.v.dtype, layout, {p.B, p.Hkv, p.Nkv, p.Dv});
    std::vector<float> d_sinks(in.sinks.size());
    AttentionGradients grads{.dq = dq.mutable_view(), .dk = dk.mutable_view(), .dv = dv.mutable_view()};
    if (!d_sinks.empty()) grads.d_sinks = d_sinks.data();
    testing::HostTensor o_host = testing::nan_tensor(dtype, layout, {p.B, p.Hq, p.Nq, p.Dv});
    const AttentionOutputs out{.o = o_host.mutable_view()};

    std::optional<double> rel_err;
    bool ok = true;
    AttentionReport forward, backward;
    std::vector<double> forward_ms, backward_ms;
    with_flag_names([&] {
        if (o.validate) {
            attention_backward(context, in, grad_out.view(), grads, options);
            testing::HostTensor rq = dq, rk = dk, rv = dv;
            std::vector<float> rs = d_sinks;
            AttentionGradients ref{.dq = rq.mutable_view(), .dk = rk.mutable_view(), .dv = rv.mutable_view()};
            if (!rs.empty()) ref.d_sinks = rs.data();
            reference_attention_backward(in, grad_out.view(), ref, options);
            rel_err = 0.0;
            const testing::Tolerance tol = testing::gradient_tolerance_for(dtype);
            for (const auto& [got, want, name] : {std::tuple{&dq, &rq, "dq"}, std::tuple{&dk, &rk, "dk"}, std::tuple{&dv, &rv, "dv"}}) {
                const testing::Comparison c = testing::compare(got->doubles(), want->doubles(), tol);
                rel_err = std::max(*rel_err, c.relative_error);
                if (!c.ok) {
                    ok = false;
                    if (progress_bar) std::cerr << '\n';
                    std::cerr << "vk-attn: backward validation failed at B=" << p.B << " Hq=" << p.Hq << " Hkv=" << p.Hkv
                              << " Nq=" << p.Nq << " Nkv=" << p.Nkv << " Dk=" << p.Dk << " Dv=" << p.Dv << ", " << name
                              << ": " << c.message << '\n';
                }
            }
        }
        for (int w = 0; w < o.warmup; ++w) {
            attention(context, in, out, options);
            attention_backward(context, in, grad_out.view(), grads, options);
        }
        for (int r = 0; r < o.repeat; ++r) {
            forward = attention(context, in, out, options);
            forward_ms.push_back(forward.gpu_ms);
            backward = attention_backward(context, in, grad_out.view(), grads, options);
            backward_ms.push_back(backward.gpu_ms);
        }
    });
    const testing::Timing f = testing::summarize(forward_ms), t = testing::summarize(backward_ms);
    Row r;
    r.add("impl", std::string("backward"));
    r.add("path", to_string(backward.path));  // fused, or unfused (three stages)
    r.add("dtype", to_string(dtype));
    add_point(r, p, o.causal, feature_text, t);
    r.add("gflops", backward.flops / (t.median_ms * 1e6));
    if (ceiling > 0) r.add("vs_gemm", backward.flops / (t.median_ms * 1e6) / ceiling);
    r.add("fwd_ms", f.median_ms);
    r.add("fwd_bwd_ms", f.median_ms + t.median_ms);
    r.add("fwd_bwd_gflops", (forward.flops + backward.flops) / ((f.median_ms + t.median_ms) * 1e6));
    r.add("device_mib", static_cast<double>(backward.device_bytes) / (1 << 20));
    if (rel_err) {
        r.add("rel_l2_err", *rel_err);
        r.add("valid", ok);
    }
    r.add("variant", backward.variant + " after " + forward.variant);
    printer.print(r);
    plotted.push_back(r);
    return ok;
}

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

int run_bench(const BenchOptions& o, const std::vector<std::string>& sweeps) {
    if (o.zigzag && !o.context_parallel) throw InvalidArgument("--zigzag", "shards the sequence for --context-parallel.");
    if (o.context_parallel) {
        const ContextParallel cp(o.zigzag);
        try {
            return run_ring_bench(o, sweeps, cp);
        } catch (const std::exception& e) {
            cp.abort(e);
        }
    }
    const auto batches = parse_sweep(sweeps[0], "--batch");
    const auto heads = parse_sweep(sweeps[1], "--heads");
    const auto seqs = parse_sweep(sweeps[2], "--seq");
    const auto dims = parse_sweep(sweeps[3], "--dim");
    const DType dtype = dtype_from_string(o.dtype, "--dtype");
    const KvStorage storage = load_kv_storage(o.storage, dtype);
    const DType kv_dtype = storage.dtype;
    const Layout layout = o.layout == "bnhd" ? Layout::bnhd : Layout::bhnd;
    const KernelVariant* forced = nullptr;
    if (!o.variant.empty() && !(forced = find_kernel_variant(o.variant)))
        throw InvalidArgument("--variant", "no variant is named '" + o.variant + "'; the catalogue has: " +
                                               kernel_variant_names() + ".");
    const Impl impl = forced ? forced->impl : parse_impl(o.impl);
    // The knobs every point (and the GEMM ceiling) runs with: the variant's, or the flags'.
    VariantOverrides knobs;
    if (o.shared_tiles != "auto") knobs.shared_tiles = o.shared_tiles == "on";
    if (o.texel_loads != "auto") knobs.texel_loads = o.texel_loads == "on";
    if (o.fused_kernel != "auto")
        knobs.fused_kernel = o.fused_kernel == "flash"    ? FusedKernel::flash
                             : o.fused_kernel == "decode" ? FusedKernel::decode
                                                          : FusedKernel::tile;
    if (o.gemm_kernel != "auto") knobs.gemm_kernel = o.gemm_kernel == "tile" ? GemmKernel::tile : GemmKernel::blocks;
    if (forced) knobs = forced->overrides;  // the variant's knobs, the others the tuning's
    const Features features = load_features(o.features);
    const std::string feature_text = features.describe();

    ContextOptions copts;
    copts.device = o.device;
    Context context(copts);
    std::cerr << "device: " << context.device().name << " (" << context.device().type << ", "
              << context.device().driver << ")\n";
    const DeviceSet device_set(o.devices, context);
    if (device_set.several()) {
        if (o.backward) throw InvalidArgument("--devices", "the backward pass runs on one device; drop --devices.");
        std::cerr << "attention on " << device_set.describe() << " (ceilings on the first)\n";
    }
    Printer printer(std::cout, o.json ? Format::json : o.csv ? Format::csv : Format::table);

    double ceiling = 0;
    if (o.gemm) {
        const testing::GemmResult g = testing::benchmark_gemm(context, o.gemm_size, o.gemm_size, o.gemm_size, o.warmup, o.repeat, o.validate, knobs);
        ceiling = g.gflops;
        Row r;
        r.add("impl", std::string("gemm"));
        r.add("m", g.m);
        r.add("n", g.n);
        r.add("k", g.k);
        r.add("median_ms", g.time.median_ms);
        r.add("min_ms", g.time.min_ms);
        r.add("max_ms", g.time.max_ms);
        r.add("gflops", g.gflops);
        if (o.validate) r.add("rel_l2_err", g.rel_l2_err);
        r.add("variant", g.variant);
        printer.print(r);
        printer.finish();  // the ceiling gets its own table
        if (o.validate && !(g.rel_l2_err <= testing::tolerance_for(DType::f32).rel)) {
            std::cerr << "vk-attn: the GEMM's relative L2 error " << g.rel_l2_err << " is over tolerance\n";
            return 1;
        }
    }

    double copy_gbps = 0;
    if (o.copy) {
        const testing::CopyResult c =
            testing::benchmark_copy(context, static_cast<std::uint64_t>(o.copy_mib) << 20, o.warmup, o.repeat, o.validate);
        copy_gbps = c.ceiling_gbps();
        Row r;
        r.add("impl", std::string("copy"));
        r.add("bytes", static_cast<std::int64_t>(c.bytes));
        r.add("median_ms", c.time.median_ms);
        r.add("min_ms", c.time.min_ms);
        r.add("max_ms", c.time.max_ms);
        r.add("gbps", c.gbps);
        r.add("transfer_ms", c.transfer_time.median_ms);
        r.add("transfer_gbps", c.transfer_gbps);
        r.add("ceiling_gbps", c.ceiling_gbps());
        if (o.validate) r.add("valid", c.valid);
        r.add("variant", c.variant);
        printer.print(r);
        printer.finish();  // the ceiling gets its own table
        if (!c.valid) {
            std::cerr << "vk-attn: the copy's destination differs from its source\n";
            return 1;
        }
    }

    std::vector<Point> points;
    for (auto B : batches)
        for (auto H : heads)
            for (auto N : seqs)
                for (auto D : dims)
                    points.push_back({B, H, o.kv_heads ? o.kv_heads : H, N, o.kv_seq ? o.kv_seq : N, D,
                                      o.dim_v ? o.dim_v : D});
    const bool tty = isatty(STDERR_FILENO);
    bool all_ok = true;
    std::vector<Row> plotted;
    std::mt19937 rng(42);
    for (std::size_t index = 0; index < points.size(); ++index) {
        const Point& p = points[index];
        if (tty && points.size() > 1) {  // a progress bar on a terminal; nothing in pipes and logs
            const std::size_t width = 24, done = width * index / points.size();
            std::cerr << "\r[" << std::string(done, '#') << std::string(width - done, ' ') << "] " << index + 1 << "/"
                      << points.size() << "  B=" << p.B << " H=" << p.Hq << " N=" << p.Nq << " D=" << p.Dk << "   " << std::flush;
        }
        check_block_dims(kv_dtype, p.Dk, p.Dv);
        // Uniform values in [-1, 1], stored in each tensor's type (K and V quantized as ggml does).
        const testing::HostTensor q = testing::random_tensor(rng, dtype, layout, {p.B, p.Hq, p.Nq, p.Dk});
        const std::vector<float> scales = head_scales(storage, p.Hkv);
        const testing::HostTensor k = testing::random_tensor(rng, kv_dtype, layout, {p.B, p.Hkv, p.Nkv, p.Dk}, 1.0f, scales);
        const testing::HostTensor v = testing::random_tensor(rng, kv_dtype, layout, {p.B, p.Hkv, p.Nkv, p.Dv}, 1.0f, scales);
        testing::HostTensor o_host = testing::nan_tensor(dtype, layout, {p.B, p.Hq, p.Nq, p.Dv});
        AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view()};
        in.k_scale = in.v_scale = scales;
        AttentionOutputs out{.o = o_host.mutable_view()};
        AttentionOptions options{.causal = o.causal ? Causal::top_left : Causal::none, .impl = impl};
        options.variant = knobs;
        features.apply(options, in);

        if (o.backward) {
            if (!run_backward_point(context, o, p, in, options, dtype, layout, rng, feature_text, ceiling, printer,
                                    plotted, tty && points.size() > 1))
                all_ok = false;
            continue;
        }
        // --validate: the first run is compared with the reference before anything is timed.
        auto validate = [&] {
            return testing::compare(o_host.doubles(), reference_stages(in, options, false).output, testing::tolerance_for(dtype));
        };
        std::optional<testing::Comparison> validation;
        AttentionReport report;
        std::vector<double> samples;
        with_flag_names([&] {
            if (o.validate) {
                device_set.attention(in, out, options);
                validation = validate();
                if (!validation->ok) {
                    all_ok = false;
                    if (tty && points.size() > 1) std::cerr << '\n';  // off the progress bar's line
                    std::cerr << "vk-attn: validation failed at B=" << p.B << " Hq=" << p.Hq << " Hkv=" << p.Hkv
                              << " Nq=" << p.Nq << " Nkv=" << p.Nkv << " Dk=" << p.Dk << " Dv=" << p.Dv << " "
                              << to_string(dtype) << "/" << to_string(kv_dtype) << ": " << validation->message << '\n';
                }
            }
            for (int w = 0; w < o.warmup; ++w) device_set.attention(in, out, options);
            for (int r = 0; r < o.repeat; ++r) {
                report = device_set.attention(in, out, options);
                samples.push_back(report.gpu_ms);
            }
        });
        const testing::Timing t = testing::summarize(samples);
        const double flops = report.flops;
        // K and V as stored (every key: an upper bound under a causal mask or a window).
        const auto kv_bytes = static_cast<double>(storage_bytes(kv_dtype, p.B * p.Hkv * p.Nkv * (p.Dk + p.Dv)));
        const double bytes = static_cast<double>(storage_bytes(dtype, p.B * p.Hq * p.Nq * (p.Dk + p.Dv))) + kv_bytes;
        Row r;
        r.add("impl", to_string(report.path));
        r.add("dtype", to_string(dtype));
        r.add("kv_dtype", to_string(kv_dtype));
        add_point(r, p, o.causal, feature_text, t);
        r.add("gflops", flops / (t.median_ms * 1e6));
        r.add("gbps", bytes / (t.median_ms * 1e6));
        const double kv_gbps = kv_bytes / (t.median_ms * 1e6);
        r.add("kv_gbps", kv_gbps);
        if (ceiling > 0) r.add("vs_gemm", flops / (t.median_ms * 1e6) / ceiling);
        if (copy_gbps > 0) r.add("kv_vs_copy", kv_gbps / copy_gbps);
        r.add("device_mib", static_cast<double>(report.device_bytes) / (1 << 20));
        if (validation) {
            r.add("rel_l2_err", validation->relative_error);
            r.add("valid", validation->ok);
        }
        r.add("chosen_by", report.chosen_by);
        r.add("variant", report.variant);
        printer.print(r);
        plotted.push_back(r);
    }
    if (tty && points.size() > 1) std::cerr << '\n';
    printer.finish();
    if (!o.plot.empty()) plot_gflops(plotted, o.plot, ceiling);
    return all_ok ? 0 : 1;
}

}  // namespace

Action add_bench(CLI::App& app) {
    auto o = std::make_shared<BenchOptions>();
    auto sweeps = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"1", "8", "1024", "64"});
    app.add_option("--batch", (*sweeps)[0], "Batch sizes: N, a list A,B,C or a range FROM:TO:xF / FROM:TO:+S")->capture_default_str();
    app.add_option("--heads", (*sweeps)[1], "Query heads (list or range)")->capture_default_str();
    app.add_option("--kv-heads", o->kv_heads, "Key/value heads (default: --heads); Hq must be a multiple");
    app.add_option("--seq", (*sweeps)[2], "Query sequence lengths (list or range)")->capture_default_str();
    app.add_option("--kv-seq", o->kv_seq, "Key/value sequence length (default: --seq)");
    app.add_option("--dim", (*sweeps)[3], "Head dimensions Dk (list or range)")->capture_default_str();
    app.add_option("--dim-v", o->dim_v, "Value head dimension Dv (default: --dim)");
    app.add_flag("--causal", o->causal, "Causal mask (top-left)");
    add_feature_flags(app, o->features);
    app.add_option("--repeat", o->repeat, "Timed runs per point")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--warmup", o->warmup, "Untimed runs before timing")->capture_default_str()->check(CLI::NonNegativeNumber);
    app.add_flag("--validate", o->validate, "Compare each point's first run with the CPU reference before timing it; exit 1 when over tolerance");
    app.add_option("--dtype", o->dtype, "Storage type of Q and O (and of K and V without --kv-dtype)")
        ->check(CLI::IsMember({"f32", "f16", "bf16"}))->capture_default_str();
    add_kv_storage_flags(app, o->storage, "the random values are quantized on the host as ggml does");
    app.add_option("--texel-loads", o->texel_loads, "Force texel loads (on: float views of f32/f16, views of words for other types) or storage-buffer word loads (off), or let the "
                                                    "tuning choose (auto)")
        ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
    app.add_option("--layout", o->layout, "Memory layout: bhnd, or bnhd (interleaved heads)")
        ->check(CLI::IsMember({"bhnd", "bnhd"}))->capture_default_str();
    app.add_option("--impl", o->impl, "auto, unfused, fused or split")->capture_default_str();
    app.add_option("--shared-tiles", o->shared_tiles,
                   "Force the shared-memory variants (on: bmm K-slices and flash K/V blocks staged in shared "
                   "memory; off: streamed to registers), or let the tuning choose (auto)")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
    app.add_option("--variant", o->variant,
                   "Run one catalogued kernel variant (its path and knobs, in place of --impl and the knob flags): " +
                       kernel_variant_names());
    app.add_option("--fused-kernel", o->fused_kernel,
                   "Force the fused path's kernel: flash (flash.comp, the CPU devices' layout), decode (the GPU "
                   "decode kernel: split-KV, several lanes per key, K/V read once per group; --impl auto or split) "
                   "or tile (FlashAttention-2's tiles, the GPUs' prefill); or let the tuning choose (auto)")
        ->check(CLI::IsMember({"auto", "flash", "decode", "tile"}))
        ->capture_default_str();
    app.add_option("--gemm-kernel", o->gemm_kernel,
                   "Force the matrix products' kernel (the three-stage path, the backward's products and --gemm): "
                   "blocks (bmm.comp's register blocks, the CPU devices') or tile (bmm_tile.comp, 128x128 tiles "
                   "and 8x8 micro-tiles, the GPUs'); or let the tuning choose (auto)")
        ->check(CLI::IsMember({"auto", "blocks", "tile"}))
        ->capture_default_str();
    app.add_option("--device", o->device, "Device index or name substring (default: $VKATTN_DEVICE or the best)");
    app.add_option("--devices", o->devices, "Several devices, e.g. 0,1 (a device may repeat): each call's (batch, "
                                            "K/V head) units split among them; gpu time is the slowest device's");
    app.add_flag("--gemm", o->gemm, "Also measure the GEMM ceiling (the engine's tiled matrix shader)");
    app.add_option("--gemm-size", o->gemm_size, "Size of the square GEMM")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_flag("--copy", o->copy, "Also measure the bandwidth ceiling (a shader copy; vkCmdCopyBuffer beside it as "
                                    "transfer_gbps); points then report kv_vs_copy, their K/V bytes per second over "
                                    "the faster copy's");
    app.add_option("--copy-mib", o->copy_mib, "MiB the copy ceiling copies")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_flag("--context-parallel", o->context_parallel,
                 "Run as one rank of an MPI job (mpirun -np P vk-attn bench ...): ring attention over the ranks; "
                 "reports the step time, bytes sent, and how much of the transfer the compute hides (with "
                 "--backward: the ring's backward)");
    app.add_flag("--zigzag", o->zigzag, "With --context-parallel: zigzag sharding (balances causal)");
    app.add_flag("--backward", o->backward, "Time the backward pass (dQ, dK, dV; and forward + backward): GFLOP/s count "
                                            "2·(3·Dk + 2·Dv) per visible pair; --validate compares the gradients with the "
                                            "reference");
    app.add_option("--plot", o->plot, "Draw GFLOP/s against sequence length to this PNG (needs python3-matplotlib)");
    auto* json = app.add_flag("--json", o->json, "One JSON object per point on stdout");
    app.add_flag("--csv", o->csv, "CSV on stdout")->excludes(json);
    return [o, sweeps] { return run_bench(*o, *sweeps); };
}

}  // namespace vkattn::tool

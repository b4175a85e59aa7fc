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
#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>
#include <unistd.h>

#include "commands.hpp"
#include "kernel_statistics_output.hpp"
#include "context_parallel.hpp"
#include "device_set.hpp"
#include "features.hpp"
#include "kv_storage.hpp"
#include "output_table.hpp"
#include "parse_integer.hpp"
#include "parse_impl.hpp"
#include "plot.hpp"
#include "vkattn/testing/attention_timing.hpp"
#include "vkattn/testing/benchmark.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/rounded_operands.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"
#include "bench_common.hpp"

namespace vkattn::tool {
namespace {

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
    if (!o.variant.empty() && !(forced = o.backward ? find_backward_variant(o.variant) : find_kernel_variant(o.variant)))
        throw InvalidArgument("--variant", "no " + std::string(o.backward ? "backward " : "") + "variant is named '" + o.variant +
                                               "'; the catalogue has: " +
                                               (o.backward ? backward_variant_names() : kernel_variant_names()) + ".");
    const Impl impl = forced ? forced->impl : parse_impl(o.impl);
    // The knobs every point (and the GEMM ceiling) runs with: the variant's, or the flags'.
    VariantOverrides knobs;
    if (o.shared_tiles != "auto") knobs.shared_tiles = o.shared_tiles == "on";
    if (o.texel_loads != "auto") knobs.texel_loads = o.texel_loads == "on";
    if (o.fused_kernel != "auto")
        knobs.fused_kernel = o.fused_kernel == "flash"     ? FusedKernel::flash
                             : o.fused_kernel == "decode"  ? FusedKernel::decode
                             : o.fused_kernel == "coopmat" ? FusedKernel::coopmat
                                                           : FusedKernel::tile;
    // The GEMM ceiling's kernel: --gemm-kernel's, else the tuning's (the points' other knobs leave the
    // ceiling alone, so that every point of a run is quoted against the same one).
    std::optional<GemmKernel> gemm_kernel;
    if (o.gemm_kernel != "auto")
        gemm_kernel = o.gemm_kernel == "tile"                                         ? GemmKernel::tile
                      : o.gemm_kernel == "coopmat" || o.gemm_kernel == "coopmat-wg" ? GemmKernel::coopmat
                                                                                      : GemmKernel::blocks;
    // coopmat-wg: the ceiling on workgroup-scope matrices (bmm_cm2.comp, VK_NV_cooperative_matrix2).
    const std::optional<bool> gemm_workgroup = o.gemm_kernel == "coopmat-wg" ? std::optional<bool>(true) : std::nullopt;
    if (gemm_kernel != GemmKernel::coopmat) knobs.gemm_kernel = gemm_kernel;  // coopmat: the ceiling's alone
    // The cooperative-matrix GEMM's shapes: one, or (tune) every candidate the device takes.
    std::vector<std::optional<GemmShape>> gemm_shapes{std::nullopt};
    if (!o.gemm_shape.empty()) {
        if (!o.gemm || gemm_kernel != GemmKernel::coopmat)
            throw InvalidArgument("--gemm-shape", "shapes the cooperative-matrix GEMM ceiling: add --gemm --gemm-kernel coopmat.");
        if (o.gemm_shape == "tune") {
            gemm_shapes.assign(vkattn::gemm_shapes().begin(), vkattn::gemm_shapes().end());
        } else if (const std::optional<GemmShape> shape = parse_gemm_shape(o.gemm_shape)) {
            gemm_shapes = {shape};
        } else {
            throw InvalidArgument("--gemm-shape", "'" + o.gemm_shape + "' is not 'tune' nor of the form SMxSN,TMxTN,DEPTH,STAGES[,words] "
                                                  "(e.g. 2x2,4x4,32,2: subgroups, accumulators per subgroup, K per slice, buffers).");
        }
    }
    // Its operands: f16 (hgemm's) unless --gemm-operands bf16 asks.
    const DType gemm_operands = o.gemm_operands == "bf16" ? DType::bf16 : DType::f16;
    if (gemm_operands != DType::f16 && (!o.gemm || gemm_kernel != GemmKernel::coopmat))
        throw InvalidArgument("--gemm-operands", "sets the cooperative-matrix GEMM ceiling's operands: add --gemm --gemm-kernel coopmat.");
    if (forced) knobs = forced->overrides;  // the variant's knobs, the others the tuning's
    const Features features = load_features(o.features);
    const std::string feature_text = features.describe();

    ContextOptions copts;
    copts.device = o.device;
    copts.kernel_statistics = o.kernel_statistics;
    Context context(copts);
    std::cerr << "device: " << context.device().name << " (" << context.device().type << ", "
              << context.device().driver << ")\n";
    const DeviceSet device_set(o.devices, context);
    // Each timed run a host call (uploads and the read-back between runs): asked for, or several devices.
    const bool host_inputs = o.inputs == "host" || device_set.several();
    if (device_set.several()) {
        if (o.backward) throw InvalidArgument("--devices", "the backward pass runs on one device; drop --devices.");
        std::cerr << "attention on " << device_set.describe() << " (ceilings on the first)\n";
    }
    Printer printer(std::cout, o.json ? Format::json : o.csv ? Format::csv : Format::table);

    double ceiling = 0;
    if (o.gemm) {
        // One row per shape timed; the ceiling is the fastest (--gemm-shape tune skips the shapes the
        // device cannot take, saying which). With --validate every shape is checked; any over
        // tolerance fails the command once all have run.
        bool over_tolerance = false;
        for (const std::optional<GemmShape>& shape : gemm_shapes) {
            testing::GemmResult g;
            try {
                g = testing::benchmark_gemm(context, o.gemm_size, o.gemm_size, o.gemm_size, warm_up_of(o, context), o.repeat, o.validate,
                                            {.gemm_kernel = gemm_kernel, .workgroup_matrices = gemm_workgroup, .gemm_shape = shape},
                                            gemm_operands);
            } catch (const InvalidArgument& e) {
                if (gemm_shapes.size() == 1 || e.argument() != "variant.gemm_shape") throw;
                std::cerr << "vk-attn: --gemm-shape tune: skipped " << to_string(*shape) << ": " << e.what() << "\n";
                continue;
            }
            ceiling = std::max(ceiling, g.gflops);
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
            add_shader_clock(r, context);
            r.add("variant", g.variant);
            printer.print(r);
            // The cooperative-matrix products round their operands to f16 or bf16: that type's tolerance.
            const DType operands = gemm_kernel == GemmKernel::coopmat ? gemm_operands : DType::f32;
            if (o.validate && !(g.rel_l2_err <= testing::tolerance_for(operands).rel)) {
                std::cerr << "vk-attn: the GEMM's relative L2 error " << g.rel_l2_err << " is over tolerance (" << g.variant << ")\n";
                over_tolerance = true;
            }
        }
        printer.finish();  // the ceiling gets its own table
        if (over_tolerance) return 1;
        if (ceiling == 0) throw InvalidArgument("--gemm-shape", "this device takes none of the candidate shapes.");
    }

    double copy_gbps = 0;
    if (o.copy) {
        const testing::CopyResult c =
            testing::benchmark_copy(context, static_cast<std::uint64_t>(o.copy_mib) << 20, warm_up_of(o, context), o.repeat, o.validate);
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
        add_shader_clock(r, context);
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
        // Products with 16-bit operands are compared on what they multiplied (testing/rounded_operands.hpp).
        auto validate = [&](DType product_type) {
            const bool rounds = product_type != DType::f32;
            const testing::RoundedOperands rounded = rounds ? testing::rounded_operands(in, product_type) : testing::RoundedOperands{};
            return testing::compare(o_host.doubles(), reference_stages(rounds ? rounded.inputs : in, options, false).output,
                                    testing::tolerance_for(dtype, p.Nkv, product_type));
        };
        std::optional<testing::Comparison> validation;
        AttentionReport report;
        std::vector<double> samples;
        int warmup_runs = 0;
        with_flag_names([&] {
            if (o.validate) {
                validation = validate(device_set.attention(in, out, options).product_type);
                if (!validation->ok) {
                    all_ok = false;
                    if (tty && points.size() > 1) std::cerr << '\n';  // off the progress bar's line
                    std::cerr << "vk-attn: validation failed at B=" << p.B << " Hq=" << p.Hq << " Hkv=" << p.Hkv
                              << " Nq=" << p.Nq << " Nkv=" << p.Nkv << " Dk=" << p.Dk << " Dv=" << p.Dv << " "
                              << to_string(dtype) << "/" << to_string(kv_dtype) << ": " << validation->message << '\n';
                }
            }
            if (host_inputs) {
                warmup_runs = warm_up_calls(warm_up_of(o, context), [&] { device_set.attention(in, out, options); });
                for (int r = 0; r < o.repeat; ++r) {
                    report = device_set.attention(in, out, options);
                    samples.push_back(report.gpu_ms);
                }
            } else {
                testing::AttentionTiming timed = testing::time_attention(context, in, out, options, warm_up_of(o, context), o.repeat);
                samples = std::move(timed.samples_ms);
                warmup_runs = timed.warmup_runs;
                report = timed.report;
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
        r.add("inputs", std::string(host_inputs ? "host" : "device"));
        r.add("warmup_runs", static_cast<std::int64_t>(warmup_runs));
        add_shader_clock(r, context);
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
    if (o.kernel_statistics) print_kernel_statistics(context, o.json ? Format::json : Format::table, std::cout);
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
    app.add_option("--warmup", o->warmup, "Untimed runs before timing (at least)")->capture_default_str()->check(CLI::NonNegativeNumber);
    app.add_option("--warmup-ms", o->warmup_ms,
                   "And untimed runs until this many milliseconds of wall time have passed after the first (a GPU idle "
                   "a moment ago runs at a fraction of its clock: each row's sm_mhz says what it ran at; default: " +
                       std::to_string(static_cast<int>(kWarmUpMs)) + " on a GPU, 0 on a CPU); 0: --warmup alone")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--inputs", o->inputs,
                   "device: each point's tensors uploaded once and its runs timed back to back, as a loop on device "
                   "tensors runs them (the default); host: each run a host call (upload, attention, read-back), the GPU "
                   "idle between runs (always so with --devices)")
        ->check(CLI::IsMember({"device", "host"}))->capture_default_str();
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
                       kernel_variant_names() + "; with --backward, one of the backward's (the forward before it takes the same path and knobs): " +
                       backward_variant_names());
    app.add_option("--fused-kernel", o->fused_kernel,
                   "Force the fused path's kernel: flash (flash.comp, the CPU devices' layout), decode (the GPU "
                   "decode kernel: split-KV, several lanes per key, K/V read once per group; --impl auto or split) "
                   "tile (FlashAttention-2's tiles, the GPUs' prefill) or coopmat (those tiles on 16x16x16 cooperative "
                   "matrices, f16 operands; f32, f16 and quantized storage); or let the tuning choose (auto)")
        ->check(CLI::IsMember({"auto", "flash", "decode", "tile", "coopmat"}))
        ->capture_default_str();
    app.add_option("--gemm-kernel", o->gemm_kernel,
                   "Force the matrix products' kernel (the three-stage path, the backward's products and --gemm): "
                   "blocks (bmm.comp's register blocks, the CPU devices') or tile (bmm_tile.comp, 128x128 tiles "
                   "and 8x8 micro-tiles, the GPUs'); or let the tuning choose (auto). coopmat: --gemm's ceiling on "
                   "16x16x16 cooperative matrices (A and B stored as f16, as cuBLAS hgemm reads them; fp32 accumulators "
                   "and C; the points keep the tuning's products); coopmat-wg: that ceiling on workgroup-scope matrices "
                   "(bmm_cm2.comp, VK_NV_cooperative_matrix2, where `vk-attn devices` says workgroup matrices; f16 A and B)")
        ->check(CLI::IsMember({"auto", "blocks", "tile", "coopmat", "coopmat-wg"}))
        ->capture_default_str();
    app.add_option("--gemm-operands", o->gemm_operands,
                   "With --gemm --gemm-kernel coopmat: A and B stored and multiplied as f16 (cuBLAS hgemm's) or bf16 "
                   "(on the matrix units where `vk-attn devices` says bf16 runs there, else refused there)")
        ->check(CLI::IsMember({"f16", "bf16"}))
        ->capture_default_str();
    app.add_option("--gemm-shape", o->gemm_shape,
                   "With --gemm --gemm-kernel coopmat: the kernel's shape SMxSN,TMxTN,DEPTH,STAGES[,words]: SMxSN "
                   "subgroups per workgroup, each TMxTN 16x16 accumulators of C, K staged DEPTH (a multiple of 16) "
                   "at a time in STAGES (1 or 2) shared buffers; ',words' keeps the typed loaders where 16-byte "
                   "loads could run (default: 2x2,4x4,32,2 on the matrix units, 2x2,2x2,16,2 portably); or 'tune': "
                   "every candidate shape the device takes, a row each, the fastest the ceiling");
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
    app.add_flag("--kernel-statistics", o->kernel_statistics,
                 "After the points, what the driver's compiler reports for every kernel the run built (registers, "
                 "spills, shared memory: VK_KHR_pipeline_executable_properties), one line or JSON object per kernel");
    auto* json = app.add_flag("--json", o->json, "One JSON object per point on stdout");
    app.add_flag("--csv", o->csv, "CSV on stdout")->excludes(json);
    return [o, sweeps] { return run_bench(*o, *sweeps); };
}


}  // namespace vkattn::tool

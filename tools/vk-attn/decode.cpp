// vk-attn decode: a decode loop you can time and validate. Random prompts (one length per sequence)
// are prefilled into a KV cache; then every step appends one new token per sequence and attends its
// query over the whole cache (bottom-right causal). By default the cache lives on the device and a
// step is one Batch: upload q and the new K/V row, append, attention, download o. With
// --host-roundtrip the same loop runs through the host-memory API, which uploads the whole cache
// every step: the comparison shows what keeping it on the device saves. With --paged the cache is a
// PagedKvCache of --block-size keys per block, its blocks handed out in a shuffled order (as a
// long-running server's pool fragments), so every sequence's keys are scattered over the pool.
//
// Figures per configuration (median over every step of every repeat):
//   ms_per_step       wall time of a step, from recording to the downloaded output;
//   host_us_per_step  CPU time to record and submit a step (device loop), or the step's time outside
//                     the attention's GPU time (host round trip: uploads, recording, readback);
//   gpu_ms_per_step   GPU time of the step's submission (timestamps);
//   tokens_per_s      B / ms_per_step.
// --validate compares every step's output with the CPU reference (vkattn/testing/compare.hpp's
// rule) and exits 1 over tolerance; max_rel_err is the worst step's relative L2 error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>

#include "commands.hpp"
#include "features.hpp"
#include "kv_storage.hpp"
#include "output_table.hpp"
#include "parse_impl.hpp"
#include "parse_integer.hpp"
#include "vkattn/testing/clock_probe.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/host_kv_cache.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

struct DecodeFlags {
    std::int64_t batch = 1, heads = 8, kv_heads = 0, dim = 64, dim_v = 0, block_size = 16;
    std::string prompt = "512";
    int steps = 32, repeat = 1;
    std::string dtype = "f32", impl = "auto", device;
    bool host_roundtrip = false, validate = false, json = false, paged = false;
    KvStorageFlags storage;
};

// The decode loop's cache on the device: contiguous, or paged over a shuffled block table.
class DeviceCache {
public:
    DeviceCache(Context& context, const DecodeFlags& f, const KvStorage& storage, std::int64_t Hkv, std::int64_t D,
                std::int64_t Dv, std::int64_t capacity, const std::vector<std::int32_t>& prompts, std::mt19937& rng) {
        const DType dtype = storage.dtype;
        const std::vector<float>& scales = storage.scales;
        const std::int64_t B = f.batch;
        if (!f.paged) {
            contiguous_.emplace(context, KvCacheOptions{.batch = B, .kv_heads = Hkv, .capacity = capacity, .dim = D,
                                                        .dim_v = Dv, .dtype = dtype, .k_scale = scales, .v_scale = scales});
            return;
        }
        // Every sequence's blocks for the whole loop, drawn from a shuffled pool.
        const std::int64_t bs = f.block_size, steps = f.steps, max_blocks = (capacity + bs - 1) / bs;
        std::vector<std::int64_t> needed;
        std::int64_t blocks = 0;
        for (const std::int32_t p : prompts) blocks += needed.emplace_back((p + steps + bs - 1) / bs);
        paged_.emplace(context, PagedKvCacheOptions{.batch = B, .kv_heads = Hkv, .num_blocks = std::max<std::int64_t>(blocks, 1),
                                                    .block_size = bs, .max_blocks_per_seq = max_blocks, .dim = D,
                                                    .dim_v = Dv, .dtype = dtype, .k_scale = scales, .v_scale = scales});
        std::vector<std::int32_t> order(static_cast<std::size_t>(paged_->options().num_blocks));
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<std::int32_t> table(static_cast<std::size_t>(B * max_blocks), -1);
        std::size_t next = 0;
        for (std::size_t b = 0; b < needed.size(); ++b)
            for (std::int64_t e = 0; e < needed[b]; ++e)
                table[b * static_cast<std::size_t>(max_blocks) + static_cast<std::size_t>(e)] = order[next++];
        Batch batch(context);
        paged_->set_block_table(batch, table);
        batch.submit().wait();
    }

    void append(Batch& batch, const DeviceTensor& k_new, const DeviceTensor& v_new, std::span<const std::int32_t> counts = {}) {
        if (paged_) paged_->append(batch, k_new, v_new, counts);
        else contiguous_->append(batch, k_new, v_new, counts);
    }
    DeviceAttentionInputs inputs(const DeviceTensor& q) const { return paged_ ? paged_->inputs(q) : contiguous_->inputs(q); }

private:
    std::optional<KvCache> contiguous_;
    std::optional<PagedKvCache> paged_;
};

using Clock = std::chrono::steady_clock;

double us_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::int32_t> parse_prompts(const std::string& text, std::int64_t batch) {
    std::vector<std::int32_t> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        const std::optional<std::int64_t> v = parse_integer(item);
        if (!v || *v < 0 || *v > 0x7fffffff)
            throw InvalidArgument("--prompt", "\"" + item + "\" is not a length (an integer >= 0).");
        out.push_back(static_cast<std::int32_t>(*v));
    }
    if (out.size() == 1) out.assign(static_cast<std::size_t>(batch), out[0]);
    if (out.size() != static_cast<std::size_t>(batch))
        throw InvalidArgument("--prompt", "gives " + std::to_string(out.size()) + " lengths for a batch of " +
                                              std::to_string(batch) + "; give one for all or one per sequence.");
    return out;
}

std::vector<double> as_doubles(const testing::HostTensor& t) {
    std::vector<double> out(static_cast<std::size_t>(t.count()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = load_element(t.data(), t.dtype, static_cast<std::int64_t>(i));
    return out;
}

// One step's random data.
struct StepData {
    testing::HostTensor q, k, v;
};

struct Totals {
    std::vector<double> step_ms, host_us, gpu_ms;
    double max_rel_err = 0.0;
    bool valid = true;
    AttentionReport report;
};

int run_decode(const DecodeFlags& f) {
    const std::int64_t B = f.batch, Hq = f.heads, Hkv = f.kv_heads ? f.kv_heads : f.heads, D = f.dim;
    const std::int64_t Dv = f.dim_v ? f.dim_v : f.dim;
    const DType dtype = dtype_from_string(f.dtype, "--dtype");
    KvStorage storage = load_kv_storage(f.storage, dtype);
    storage.scales = head_scales(storage, Hkv);
    check_block_dims(storage.dtype, D, Dv);
    const Impl impl = parse_impl(f.impl);
    if (f.paged && f.host_roundtrip)
        throw InvalidArgument("--paged", "the host-memory API has no paged cache; drop --host-roundtrip to time one.");
    const std::vector<std::int32_t> prompts = parse_prompts(f.prompt, B);
    const std::int32_t longest = *std::max_element(prompts.begin(), prompts.end());
    const std::int64_t capacity = longest + f.steps;
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = impl};

    ContextOptions copts;
    copts.device = f.device;
    Context context(copts);
    std::cerr << "device: " << context.device().name << " (" << context.device().type << ", "
              << context.device().driver << ")\n";

    // Every input is drawn before any timing: the prompt's rows, then each step's q and new row.
    std::mt19937 rng(1234);
    const testing::HostTensor prompt_k = testing::random_tensor(rng, dtype, Layout::bhnd, {B, Hkv, std::max(longest, 1), D});
    const testing::HostTensor prompt_v = testing::random_tensor(rng, dtype, Layout::bhnd, {B, Hkv, std::max(longest, 1), Dv});
    std::vector<StepData> data;
    for (int s = 0; s < f.steps; ++s)
        data.push_back({testing::random_tensor(rng, dtype, Layout::bhnd, {B, Hq, 1, D}),
                        testing::random_tensor(rng, dtype, Layout::bhnd, {B, Hkv, 1, D}),
                        testing::random_tensor(rng, dtype, Layout::bhnd, {B, Hkv, 1, Dv})});
    std::mt19937 table_rng(99);  // the paged cache's block order

    Totals totals;
    for (int repeat = 0; repeat < f.repeat; ++repeat) {
        testing::HostKvCache host(storage.dtype, B, Hkv, capacity, D, Dv, {}, storage.scales, storage.scales);
        host.append(prompt_k, prompt_v, prompts);
        testing::HostTensor o = testing::nan_tensor(dtype, Layout::bhnd, {B, Hq, 1, Dv});

        // Device loop state (unused with --host-roundtrip).
        std::optional<DeviceCache> cache;
        std::optional<AttentionPlan> plan;
        DeviceTensor q, k_new, v_new, out;
        if (!f.host_roundtrip) {
            cache.emplace(context, f, storage, Hkv, D, Dv, capacity, prompts, table_rng);
            Batch prefill(context);
            cache->append(prefill, DeviceTensor::from_host(context, prompt_k.view()),
                          DeviceTensor::from_host(context, prompt_v.view()), prompts);
            prefill.submit().wait();
            q = DeviceTensor::empty(context, dtype, {B, Hq, 1, D});
            k_new = DeviceTensor::empty(context, dtype, {B, Hkv, 1, D});
            v_new = DeviceTensor::empty(context, dtype, {B, Hkv, 1, Dv});
            out = DeviceTensor::empty(context, dtype, {B, Hq, 1, Dv});
            plan.emplace(context, cache->inputs(q), DeviceAttentionOutputs{out}, options);
            totals.report = plan->report();
        }

        for (int s = 0; s < f.steps; ++s) {
            const StepData& step = data[static_cast<std::size_t>(s)];
            const Clock::time_point start = Clock::now();
            if (f.host_roundtrip) {
                host.append(step.k, step.v);
                const AttentionReport r = attention(context, host.inputs(step.q), {.o = o.mutable_view()}, options);
                const double wall_us = us_between(start, Clock::now());
                totals.step_ms.push_back(wall_us * 1e-3);
                totals.host_us.push_back(std::max(0.0, wall_us - r.gpu_ms * 1e3));
                totals.gpu_ms.push_back(r.gpu_ms);
                totals.report = r;
            } else {
                Batch batch(context);
                batch.upload(q, step.q.view());
                batch.upload(k_new, step.k.view());
                batch.upload(v_new, step.v.view());
                cache->append(batch, k_new, v_new);
                plan->run(batch, cache->inputs(q), {out});
                batch.download(out, o.mutable_view());
                Submission submission = batch.submit();
                const Clock::time_point submitted = Clock::now();
                submission.wait();
                totals.step_ms.push_back(us_between(start, Clock::now()) * 1e-3);
                totals.host_us.push_back(us_between(start, submitted));
                totals.gpu_ms.push_back(submission.gpu_ms());
                host.append(step.k, step.v);
            }
            if (f.validate) {
                testing::HostTensor ref = testing::nan_tensor(dtype, Layout::bhnd, o.shape);
                reference_attention(host.inputs(step.q), {.o = ref.mutable_view()}, options);
                const testing::Comparison c = testing::compare(as_doubles(o), as_doubles(ref), testing::tolerance_for(dtype));
                totals.max_rel_err = std::max(totals.max_rel_err, c.relative_error);
                if (!c.ok) {
                    if (totals.valid) std::cerr << "vk-attn: step " << s << " is over tolerance: " << c.message << '\n';
                    totals.valid = false;
                }
            }
        }
    }

    const double ms = median(totals.step_ms);
    Row r;
    r.add("mode", std::string(f.host_roundtrip ? "host-roundtrip" : "device"));
    r.add("batch", B);
    r.add("heads", Hq);
    r.add("kv_heads", Hkv);
    r.add("dim", D);
    r.add("dim_v", Dv);
    r.add("dtype", to_string(dtype));
    r.add("kv_dtype", to_string(storage.dtype));
    r.add("prompt", static_cast<std::int64_t>(longest));
    r.add("prompts", f.prompt);
    r.add("steps", static_cast<std::int64_t>(f.steps));
    r.add("repeat", static_cast<std::int64_t>(f.repeat));
    r.add("paged", f.paged);
    r.add("block_size", f.paged ? f.block_size : std::int64_t{0});
    r.add("path", to_string(totals.report.path));
    r.add("ms_per_step", ms);
    r.add("gpu_ms_per_step", median(totals.gpu_ms));
    r.add("host_us_per_step", median(totals.host_us));
    r.add("tokens_per_s", static_cast<double>(B) / (ms * 1e-3));
    // The shader clock right after the steps (testing::shader_clock_mhz), where the device reads one.
    if (const std::optional<double> mhz = testing::shader_clock_mhz(context)) r.add("sm_mhz", *mhz);
    if (f.validate) r.add("max_rel_err", totals.max_rel_err);
    r.add("valid", f.validate ? totals.valid : true);
    r.add("variant", totals.report.variant);
    Printer printer(std::cout, f.json ? Format::json : Format::table);
    printer.print(r);
    printer.finish();
    return totals.valid ? 0 : 1;
}

}  // namespace

Action add_decode(CLI::App& app) {
    auto f = std::make_shared<DecodeFlags>();
    app.add_option("--batch", f->batch, "Sequences decoded together")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--heads", f->heads, "Query heads")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--kv-heads", f->kv_heads, "Key/value heads (default: --heads); Hq must be a multiple")
        ->check(CLI::PositiveNumber);
    app.add_option("--dim", f->dim, "Head dimension Dk")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--dim-v", f->dim_v, "Value head dimension Dv (default: --dim)")->check(CLI::PositiveNumber);
    app.add_option("--prompt", f->prompt, "Prompt length for every sequence, or one per sequence: N or N1,N2,...")
        ->capture_default_str();
    app.add_option("--steps", f->steps, "Decode steps (one new token per sequence each)")->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--dtype", f->dtype, "Storage type of Q, O and the new rows (and of the cache without --kv-dtype)")
        ->check(CLI::IsMember({"f32", "f16", "bf16"}))
        ->capture_default_str();
    add_kv_storage_flags(app, f->storage, "the cache's appends quantize the new rows on the device");
    app.add_option("--impl", f->impl, "auto, fused, split or unfused")
        ->check(CLI::IsMember({"auto", "fused", "split", "unfused"}))->capture_default_str();
    CLI::Option* paged =
        app.add_flag("--paged", f->paged, "Keep the cache paged (blocks of --block-size keys, in a shuffled order)");
    app.add_option("--block-size", f->block_size, "Keys per block of the paged cache")->capture_default_str()
        ->check(CLI::PositiveNumber)->needs(paged);
    app.add_flag("--host-roundtrip", f->host_roundtrip,
                 "Run the loop through the host-memory API (the whole cache uploaded every step)");
    app.add_flag("--validate", f->validate, "Compare every step with the CPU reference; exit 1 over tolerance");
    app.add_option("--repeat", f->repeat, "Times the whole loop runs (fresh cache each time)")->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_flag("--json", f->json, "One JSON object on stdout");
    app.add_option("--device", f->device, "Device index or name substring (default: $VKATTN_DEVICE or the best)");
    return [f] { return with_flag_names([&] { return run_decode(*f); }); };
}

}  // namespace vkattn::tool

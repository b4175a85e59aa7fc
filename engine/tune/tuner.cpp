#include "vkattn/tune.hpp"

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>

#include "context_state.hpp"
#include "tune/table.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/plan.hpp"
#include "vkattn/variants.hpp"

namespace vkattn {
namespace {

std::array<std::int64_t, 4> dense(const std::array<std::int64_t, 4>& s) { return {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1}; }

// A device tensor of zeros (the timings do not depend on the values).
DeviceTensor zeros(Context& context, DType dtype, const std::array<std::int64_t, 4>& shape) {
    const std::vector<std::uint8_t> bytes(storage_bytes(dtype, shape[0] * shape[1] * shape[2] * shape[3]));
    return DeviceTensor::from_host(context, make_view(static_cast<const void*>(bytes.data()), dtype, Layout::bhnd, shape));
}

// The problem a shape resolves to, for its bucket.
detail::Problem problem_of(const TuneShape& s, const AttentionOptions& options) {
    auto layout = [&](std::int64_t H, std::int64_t N, std::int64_t D) {
        const std::array<std::int64_t, 4> shape{s.B, H, N, D};
        return detail::TensorLayout{s.dtype, shape, dense(shape)};
    };
    detail::AttentionSpec spec;
    spec.q = layout(s.Hq, s.Nq, s.D);
    spec.k = layout(s.Hkv, s.Nkv, s.D);
    spec.v = layout(s.Hkv, s.Nkv, s.D);
    spec.o = layout(s.Hq, s.Nq, s.D);
    spec.options = options;
    return detail::resolve(spec);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

std::string TuneShape::describe() const {
    std::ostringstream s;
    s << "B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " Nq=" << Nq << " Nkv=" << Nkv << " D=" << D << ' '
      << to_string(dtype) << (causal ? " causal" : "");
    return s.str();
}

std::vector<TuneShape> default_tune_grid(const Context& context) {
    std::vector<TuneShape> grid;
    std::vector<DType> dtypes{DType::f32};
    if (context.device().fp16_storage) dtypes.push_back(DType::f16);
    for (const DType dtype : dtypes)
        for (const std::int64_t d : {64, 128}) {
            for (const std::int64_t keys : {4096, 32768})
                grid.push_back({.B = 1, .Hq = 32, .Hkv = 8, .Nq = 1, .Nkv = keys, .D = d, .dtype = dtype, .causal = true});
            for (const std::int64_t n : {1024, 4096})
                for (const bool causal : {false, true})
                    grid.push_back({.B = 1, .Hq = 32, .Hkv = 32, .Nq = n, .Nkv = n, .D = d, .dtype = dtype, .causal = causal});
        }
    return grid;
}

TuneReport tune(Context& context, const TuneOptions& options) {
    if (options.repeat < 1) throw InvalidArgument("repeat", "at least one timed run is needed.");
    if (options.warmup < 0) throw InvalidArgument("warmup", "must not be negative.");
    detail::ContextState& state = detail::ContextAccess::state(context);
    const std::vector<TuneShape> shapes = options.shapes.empty() ? default_tune_grid(context) : options.shapes;
    std::vector<const KernelVariant*> candidates;
    for (const KernelVariant& v : kernel_variants())
        if (options.variants.empty() || std::find(options.variants.begin(), options.variants.end(), v.name) != options.variants.end())
            candidates.push_back(&v);
    for (const std::string& name : options.variants)
        if (!find_kernel_variant(name))
            throw InvalidArgument("variants", "no variant is named '" + name + "'; the catalogue has: " + kernel_variant_names() + ".");
    TuneReport report;
    auto table = std::make_unique<detail::TuningTable>();
    if (const detail::TuningTable* current = state.tuning.get()) *table = *current;  // merged into
    table->device_uuid = context.device().uuid;
    table->driver = context.device().driver;
    for (const TuneShape& s : shapes) {
        const Causal causal = s.causal ? Causal::bottom_right : Causal::none;
        TuneResult result{.shape = s, .bucket = detail::tuning_bucket(problem_of(s, {.causal = causal}))};
        const DeviceAttentionInputs in{.q = zeros(context, s.dtype, {s.B, s.Hq, s.Nq, s.D}),
                                       .k = zeros(context, s.dtype, {s.B, s.Hkv, s.Nkv, s.D}),
                                       .v = zeros(context, s.dtype, {s.B, s.Hkv, s.Nkv, s.D})};
        const DeviceAttentionOutputs out{.o = DeviceTensor::empty(context, s.dtype, {s.B, s.Hq, s.Nq, s.D})};
        for (const KernelVariant* candidate : candidates) {
            const KernelVariant& variant = *candidate;
            if (f16_products(variant.overrides) && s.dtype != DType::f16) continue;
            const AttentionOptions opts{.causal = causal, .impl = variant.impl, .variant = variant.overrides};
            std::unique_ptr<AttentionPlan> plan;
            try {
                plan = std::make_unique<AttentionPlan>(context, in, out, opts);
            } catch (const InvalidArgument&) {
                continue;  // the variant cannot run this shape on this device
            } catch (const ResourceLimit&) {
                continue;
            }
            std::vector<double> times;
            for (int i = 0; i < options.warmup + options.repeat; ++i) {
                Batch batch(context);
                plan->run(batch, in, out);
                Submission done = batch.submit();
                done.wait();
                if (i >= options.warmup) times.push_back(done.gpu_ms());
            }
            result.timings.emplace_back(variant.name, median(times));
        }
        if (result.timings.empty()) throw InvalidArgument("shapes", "no variant runs " + s.describe() + " on this device.");
        const auto best = std::min_element(result.timings.begin(), result.timings.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
        result.winner = best->first;
        table->winners[result.bucket] = {best->first, best->second};
        report.results.push_back(std::move(result));
    }
    if (options.save) {
        if (const std::filesystem::path& file = state.tuning_file; !file.empty()) {
            std::filesystem::create_directories(file.parent_path());
            const std::filesystem::path partial = file.string() + ".partial";
            {
                std::ofstream f(partial, std::ios::binary | std::ios::trunc);
                f << table->serialize();
                if (!f) throw Error("could not write the tuning table " + partial.string());
            }
            std::filesystem::rename(partial, file);  // whole or not at all
            report.table_file = file.string();
        }
        state.tuning = std::move(table);
        // Plans made before hold the heuristics' choice: drop them so the next call sees the table.
        state.plans.clear();
    }
    return report;
}

}  // namespace vkattn

#include "vkattn/tune.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "context_state.hpp"
#include "plan/plan_state.hpp"
#include "submit/batch_state.hpp"
#include "tune/table.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/plan.hpp"
#include "vkattn/variants.hpp"

namespace vkattn {
namespace {

std::array<std::int64_t, 4> dense(const std::array<std::int64_t, 4>& s) { return {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1}; }

// A device tensor of seeded uniform values in [-1, 1]: varied inputs, so that a candidate's output
// can be told from another's (zeros made every kernel's output the same average of V's zeros).
DeviceTensor random_values(Context& context, DType dtype, const std::array<std::int64_t, 4>& shape, std::mt19937& rng) {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    const auto elements = static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]);
    std::vector<float> f32;
    std::vector<std::uint16_t> bits;
    if (dtype == DType::f32) {
        f32.resize(elements);
        for (float& x : f32) x = value(rng);
    } else if (dtype == DType::f16 || dtype == DType::bf16) {
        bits.resize(elements);
        for (std::uint16_t& x : bits) x = dtype == DType::f16 ? float_to_half(value(rng)) : float_to_bf16(value(rng));
    } else {
        throw InvalidArgument("shapes", "the tuner's shapes store q, k and v as f32, f16 or bf16, not " + to_string(dtype) + ".");
    }
    const void* data = dtype == DType::f32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(bits.data());
    return DeviceTensor::from_host(context, make_view(data, dtype, Layout::bhnd, shape));
}

// A device tensor's values (f32, f16 or bf16) as doubles.
std::vector<double> values_of(const DeviceTensor& t) {
    const std::array<std::int64_t, 4> shape = t.shape();
    std::vector<double> out(static_cast<std::size_t>(t.elements()));
    if (t.dtype() == DType::f32) {
        std::vector<float> host(out.size());
        t.download(make_view(static_cast<void*>(host.data()), DType::f32, Layout::bhnd, shape));
        std::copy(host.begin(), host.end(), out.begin());
    } else {
        std::vector<std::uint16_t> host(out.size());
        t.download(make_view(static_cast<void*>(host.data()), t.dtype(), Layout::bhnd, shape));
        for (std::size_t i = 0; i < out.size(); ++i)
            out[i] = t.dtype() == DType::f16 ? half_to_float(host[i]) : bf16_to_float(host[i]);
    }
    return out;
}

// ‖a − b‖₂ / ‖b‖₂ (0 where both vanish; NaN anywhere in a makes it NaN, which no bound passes).
double relative_distance(const std::vector<double>& a, const std::vector<double>& b) {
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff += (a[i] - b[i]) * (a[i] - b[i]);
        norm += b[i] * b[i];
    }
    return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// How far a candidate's output may lie from the heuristics' choice: both kernels' errors against
// the exact result (testing/compare.hpp's rule: fp32 ~1e-5 each and more over long sums, 16-bit
// storage its own rounding, 16-bit products f16's at least), with room. A candidate past it computes something
// else (on an H200 the units' unsplit causal kernel at D = 128 missed by 7.6e-3 to 8.6e-2 in session
// 21, until session 22 found a subgroup left unreconverged) and must not win for being fast.
double agreement_bound(DType dtype, bool rounds_operands) {
    const double storage = dtype == DType::f32 ? 1e-4 : dtype == DType::f16 ? 3e-3 : 4e-3;
    return rounds_operands ? std::max(storage, 3e-3) : storage;
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

// The median GPU time of options.repeat runs after options.warmup, each a batch `record` fills.
template <class Record>
double median_gpu_ms(Context& context, const TuneOptions& options, Record record) {
    std::vector<double> times;
    for (int i = 0; i < options.warmup + options.repeat; ++i) {
        Batch batch(context);
        record(batch);
        Submission done = batch.submit();
        done.wait();
        if (i >= options.warmup) times.push_back(done.gpu_ms());
    }
    return median(times);
}

// A candidate's time, and its rejection where its output lies further than the bound
// (TuneOptions::agreement, else `default_bound`) from the heuristics' choice's.
void add_timing(TuneResult& result, const TuneOptions& options, const std::string& name, double ms, double distance,
                double default_bound) {
    result.timings.emplace_back(name, ms);
    const double bound = options.agreement > 0 ? options.agreement : default_bound;
    if (!(distance <= bound)) result.rejected.emplace_back(name, distance);
}

// Times the forward's candidates on shape s: its result, winner not yet chosen.
TuneResult time_forward(Context& context, const TuneShape& s, const std::vector<const KernelVariant*>& candidates,
                        const TuneOptions& options, std::mt19937& rng) {
    const Causal causal = s.causal ? Causal::bottom_right : Causal::none;
    TuneResult result{.shape = s, .bucket = detail::tuning_bucket(problem_of(s, {.causal = causal}))};
    const DeviceAttentionInputs in{.q = random_values(context, s.dtype, {s.B, s.Hq, s.Nq, s.D}, rng),
                                   .k = random_values(context, s.dtype, {s.B, s.Hkv, s.Nkv, s.D}, rng),
                                   .v = random_values(context, s.dtype, {s.B, s.Hkv, s.Nkv, s.D}, rng)};
    const DeviceAttentionOutputs out{.o = DeviceTensor::empty(context, s.dtype, {s.B, s.Hq, s.Nq, s.D})};
    // The heuristics' choice on these inputs (planned without the loaded table, whose winner
    // would answer otherwise): what every candidate must agree with.
    {
        Batch batch(context);
        detail::PlanState(detail::ContextAccess::runtime(context), nullptr, detail::spec_of(in, out, {.causal = causal}))
            .run(detail::BatchAccess::state(batch), in, out, true);
        batch.submit().wait();
    }
    const std::vector<double> baseline = values_of(out.o);
    for (const KernelVariant* candidate : candidates) {
        const KernelVariant& variant = *candidate;
        if (rounds_operands(variant.overrides) && s.dtype == DType::f32) continue;
        const AttentionOptions opts{.causal = causal, .impl = variant.impl, .variant = variant.overrides};
        std::unique_ptr<AttentionPlan> plan;
        try {
            plan = std::make_unique<AttentionPlan>(context, in, out, opts);
        } catch (const InvalidArgument&) {
            continue;  // the variant cannot run this shape on this device
        } catch (const ResourceLimit&) {
            continue;
        }
        const double ms = median_gpu_ms(context, options, [&](Batch& batch) { plan->run(batch, in, out); });
        add_timing(result, options, variant.name, ms, relative_distance(values_of(out.o), baseline),
                   agreement_bound(s.dtype, rounds_operands(variant.overrides)));
    }
    return result;
}

// The catalogue's variants named in `names`, or all of them where it has none of those names.
std::vector<const KernelVariant*> named_or_all(const std::vector<KernelVariant>& catalogue, const std::vector<std::string>& names) {
    std::vector<const KernelVariant*> named, all;
    for (const KernelVariant& v : catalogue) {
        all.push_back(&v);
        if (std::find(names.begin(), names.end(), v.name) != names.end()) named.push_back(&v);
    }
    return named.empty() ? all : named;
}

// Times the backward's candidates on shape s, after one forward for o and lse: dQ, dK and dV of
// each against the heuristics' (a batch without the table). Gradients are a few times less exact
// than o (testing/compare.hpp's gradient tolerances), so twice the forward's agreement bound.
TuneResult time_backward(Context& context, const TuneShape& s, const std::vector<const KernelVariant*>& candidates,
                         const TuneOptions& options, std::mt19937& rng) {
    const AttentionOptions base{.causal = s.causal ? Causal::bottom_right : Causal::none};
    TuneResult result{.shape = s, .bucket = detail::backward_tuning_bucket(problem_of(s, base))};
    const std::array<std::int64_t, 4> q_shape{s.B, s.Hq, s.Nq, s.D}, kv_shape{s.B, s.Hkv, s.Nkv, s.D};
    const DeviceAttentionInputs in{.q = random_values(context, s.dtype, q_shape, rng),
                                   .k = random_values(context, s.dtype, kv_shape, rng),
                                   .v = random_values(context, s.dtype, kv_shape, rng)};
    const DeviceTensor grad_out = random_values(context, s.dtype, q_shape, rng);
    const DeviceAttentionOutputs forward{.o = DeviceTensor::empty(context, s.dtype, q_shape),
                                         .lse = DeviceTensor::empty(context, DType::f32, {s.B, s.Hq, s.Nq, 1})};
    attention(context, in, forward, base);
    const DeviceAttentionGradients grads{.dq = DeviceTensor::empty(context, s.dtype, q_shape),
                                         .dk = DeviceTensor::empty(context, s.dtype, kv_shape),
                                         .dv = DeviceTensor::empty(context, s.dtype, kv_shape)};
    auto gradients = [&] {
        std::vector<double> all;
        for (const DeviceTensor* g : {&grads.dq, &grads.dk, &grads.dv}) {
            const std::vector<double> values = values_of(*g);
            all.insert(all.end(), values.begin(), values.end());
        }
        return all;
    };
    {
        Batch batch = detail::BatchAccess::make(detail::ContextAccess::runtime(context));  // no table: the heuristics
        attention_backward(batch, in, forward.o, forward.lse, grad_out, grads, base);
        batch.submit().wait();
    }
    const std::vector<double> baseline = gradients();
    for (const KernelVariant* candidate : candidates) {
        const KernelVariant& variant = *candidate;
        if (rounds_operands(variant.overrides) && s.dtype == DType::f32) continue;
        AttentionOptions opts = base;
        opts.impl = variant.impl;
        opts.variant = variant.overrides;
        double ms = 0;
        try {
            ms = median_gpu_ms(context, options, [&](Batch& batch) {
                attention_backward(batch, in, forward.o, forward.lse, grad_out, grads, opts);
            });
        } catch (const InvalidArgument&) {
            continue;  // the variant cannot run this shape on this device (refused before anything was recorded)
        } catch (const ResourceLimit&) {
            continue;
        }
        add_timing(result, options, variant.name, ms, relative_distance(gradients(), baseline),
                   2 * agreement_bound(s.dtype, rounds_operands(variant.overrides)));
    }
    return result;
}

}  // namespace

std::string TuneShape::describe() const {
    std::ostringstream s;
    s << "B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " Nq=" << Nq << " Nkv=" << Nkv << " D=" << D << ' '
      << to_string(dtype) << (causal ? " causal" : "") << (backward ? " backward" : "");
    return s.str();
}

std::vector<TuneShape> default_tune_grid(const Context& context) {
    std::vector<TuneShape> grid;
    std::vector<DType> dtypes{DType::f32};
    if (context.device().fp16_storage) dtypes.push_back(DType::f16);
    if (context.device().fp16_storage && context.device().bf16_matrix_units) dtypes.push_back(DType::bf16);
    for (const DType dtype : dtypes)
        for (const std::int64_t d : {64, 128}) {
            for (const std::int64_t keys : {4096, 32768})
                grid.push_back({.B = 1, .Hq = 32, .Hkv = 8, .Nq = 1, .Nkv = keys, .D = d, .dtype = dtype, .causal = true});
            for (const std::int64_t n : {1024, 4096})
                for (const bool causal : {false, true})
                    grid.push_back({.B = 1, .Hq = 32, .Hkv = 32, .Nq = n, .Nkv = n, .D = d, .dtype = dtype, .causal = causal});
            for (const bool causal : {false, true})
                grid.push_back(
                    {.B = 1, .Hq = 32, .Hkv = 32, .Nq = 4096, .Nkv = 4096, .D = d, .dtype = dtype, .causal = causal, .backward = true});
        }
    return grid;
}

TuneReport tune(Context& context, const TuneOptions& options) {
    if (options.repeat < 1) throw InvalidArgument("repeat", "at least one timed run is needed.");
    if (options.warmup < 0) throw InvalidArgument("warmup", "must not be negative.");
    if (!(options.agreement >= 0)) throw InvalidArgument("agreement", "must be a relative distance ≥ 0 (0: the storage type's default).");
    detail::ContextState& state = detail::ContextAccess::state(context);
    const std::vector<TuneShape> shapes = options.shapes.empty() ? default_tune_grid(context) : options.shapes;
    for (const std::string& name : options.variants)
        if (!find_kernel_variant(name) && !find_backward_variant(name))
            throw InvalidArgument("variants", "no variant is named '" + name + "'; the catalogue has: " + kernel_variant_names() +
                                                  "; the backward's: " + backward_variant_names() + ".");
    const std::vector<const KernelVariant*> candidates = named_or_all(kernel_variants(), options.variants);
    const std::vector<const KernelVariant*> backward_candidates = named_or_all(backward_variants(), options.variants);
    TuneReport report;
    auto table = std::make_unique<detail::TuningTable>();
    if (const detail::TuningTable* current = state.tuning.get()) *table = *current;  // merged into
    table->device_uuid = context.device().uuid;
    table->driver = context.device().driver;
    for (const TuneShape& s : shapes) {
        std::mt19937 rng(static_cast<std::uint32_t>(report.results.size() + 1));
        TuneResult result = s.backward ? time_backward(context, s, backward_candidates, options, rng)
                                       : time_forward(context, s, candidates, options, rng);
        if (result.timings.empty()) throw InvalidArgument("shapes", "no variant runs " + s.describe() + " on this device.");
        auto agreed = [&](const std::string& name) {
            return std::none_of(result.rejected.begin(), result.rejected.end(), [&](const auto& r) { return r.first == name; });
        };
        const std::pair<std::string, double>* best = nullptr;
        for (const auto& timing : result.timings)
            if (agreed(timing.first) && (!best || timing.second < best->second)) best = &timing;
        if (!best)
            throw Error("no variant's output agrees with the heuristics' choice on " + s.describe() +
                        " (every one was rejected: see TuneResult::rejected).");
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

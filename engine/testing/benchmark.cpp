// The ceilings: the GEMM (the bmm shader on one large product) and the copy (copy.comp beside
// vkCmdCopyBuffer), timed like attention. They record dispatches themselves, so they reach into the
// engine (its private headers, the context's Runtime).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "attention/tuning.hpp"
#include "attention/workgroup_matrices.hpp"
#include "plan/host_tensors.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "tensor/storage.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/benchmark.hpp"
#include "testing/timed_runs.hpp"

namespace vkattn::testing {

Timing summarize(std::vector<double> samples) {
    if (samples.empty()) return {};
    std::sort(samples.begin(), samples.end());
    const std::size_t n = samples.size();
    const double median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
    return {median, samples.front(), samples.back()};
}


GemmResult benchmark_gemm(Context& context, std::int64_t m, std::int64_t n, std::int64_t k, const WarmUp& warmup, int repeat,
                          bool validate, const VariantOverrides& overrides, DType coopmat_operands) {
    if (m < 1 || n < 1 || k < 1) throw InvalidArgument("gemm", "m, n and k must be at least 1.");
    if (repeat < 1) throw InvalidArgument("repeat", "at least one timed repeat is needed.");
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const auto& caps = runtime.device().caps();
    if (coopmat_operands != DType::f16 && coopmat_operands != DType::bf16)
        throw InvalidArgument("coopmat_operands", "the cooperative-matrix GEMM's A and B are f16 or bf16, not " +
                                                      to_string(coopmat_operands) + ".");
    detail::BmmConfig config = detail::choose_gemm(caps, m, n, k, overrides);
    // The cooperative-matrix ceiling reads f16 operands, as cuBLAS hgemm does (its products multiply
    // f16 values anyway), or bf16 ones; the others read fp32. C is fp32 either way.
    const DType operand = config.coopmat ? coopmat_operands : DType::f32;
    const auto bytes = [](std::int64_t a, std::int64_t b, DType dtype) { return static_cast<std::uint64_t>(a * b) * size_of(dtype); };
    for (auto [what, size] : {std::pair{"A", bytes(m, k, operand)}, std::pair{"B", bytes(k, n, operand)},
                              std::pair{"C", bytes(m, n, DType::f32)}})
        if (size > runtime.max_binding_bytes())
            throw ResourceLimit(std::string("gemm: ") + what + " needs " + std::to_string(size) +
                                " bytes in one binding; the device allows " +
                                std::to_string(runtime.max_binding_bytes()) + ".");

    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
    for (auto& x : a) x = dist(rng);
    for (auto& x : b) x = dist(rng);
    // 16-bit operands: their bits for the device, and the reference multiplies the same rounded values.
    const bool halves = operand != DType::f32;
    std::vector<std::uint16_t> a16, b16;
    if (halves)
        for (auto [values, bits] : {std::pair{&a, &a16}, std::pair{&b, &b16}})
            for (float& x : *values) {
                bits->push_back(operand == DType::bf16 ? float_to_bf16(x) : float_to_half(x));
                x = operand == DType::bf16 ? bf16_to_float(bits->back()) : half_to_float(bits->back());
            }
    const void* a_host = halves ? static_cast<const void*>(a16.data()) : a.data();
    const void* b_host = halves ? static_cast<const void*>(b16.data()) : b.data();

    auto flat = [&](DType dtype, std::int64_t count, const std::string& what) {
        return detail::own_dense(runtime, dtype, {1, 1, 1, count}, what);
    };
    const DeviceTensor ta = flat(operand, m * k, "gemm A"), tb = flat(operand, k * n, "gemm B"),
                       tc = flat(DType::f32, m * n, "gemm C");
    const DeviceTensor no_bias_tensor = flat(DType::f32, 4, "an unused bias binding");
    auto buffer = [](const DeviceTensor& t) -> const vk::Buffer& { return detail::TensorAccess::storage(t)->buffer; };
    const vk::Buffer &da = buffer(ta), &db = buffer(tb), &dc = buffer(tc), &no_bias = buffer(no_bias_tensor);

    // One unit: a single (batch, head) of M×K times K×N, dense rows.
    detail::BmmParams params{.chunk = {.first_unit = 0, .first_row = 0, .rows = static_cast<std::uint32_t>(m)},
                             .M = static_cast<std::uint32_t>(m),
                             .N = static_cast<std::uint32_t>(n),
                             .K = static_cast<std::uint32_t>(k),
                             .alpha = 1.0f,
                             .heads = 1,
                             .group = 1};
    params.a.stride = {0, 0, static_cast<std::uint32_t>(k), 1};
    params.b.stride = {0, 0, static_cast<std::uint32_t>(n), 1};
    params.c.stride = {0, 0, static_cast<std::uint32_t>(n), 1};
    config.coopmat_wide = detail::coopmat_wide_operands(config, detail::BmmForm::a_b, operand, operand, params.a, params.b, n, k);
    if (config.workgroup_matrices) {  // bmm_cm2.comp's tensor loads: A's rows K, B's N elements apart
        detail::require_tensor_loads_aligned(params.a, k, "A");
        detail::require_tensor_loads_aligned(params.b, n, "B");
    }
    const vk::Kernel& kernel = detail::bmm_kernel(runtime, config, detail::BmmForm::a_b, operand, operand, DType::f32);
    detail::Dispatch d{.kernel = &kernel, .params = params};
    d.bindings = {{1, &da, 0, da.size()}, {2, &db, 0, db.size()}, {3, &dc, 0, dc.size()}, {4, &no_bias, 0, 16},
                  {5, &no_bias, 0, 16}};  // no addend, no fp8 scales
    d.groups = {static_cast<std::uint32_t>((n + config.block_cols() - 1) / config.block_cols()),
                static_cast<std::uint32_t>((m + config.block_rows() - 1) / config.block_rows()), 1};

    detail::Program program(runtime);
    program.dispatch(d);
    std::vector<float> c(validate ? static_cast<std::size_t>(m * n) : 0);
    const std::vector<double> samples = timing::timed_runs(
        runtime, warmup, repeat,
        [&](detail::BatchState& state) {
            detail::write_fresh(state, ta, a_host);
            detail::write_fresh(state, tb, b_host);
        },
        [&](detail::BatchState&, VkCommandBuffer commands) { program.replay(commands); },
        [&](detail::BatchState& state) {
            if (validate)
                detail::read_back(state, tc, make_view(static_cast<void*>(c.data()), DType::f32, Layout::bhnd, tc.shape()));
        });

    GemmResult result;
    result.m = m;
    result.n = n;
    result.k = k;
    result.time = summarize(samples);
    result.gflops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
                    (result.time.median_ms * 1e6);
    result.variant = "gemm " + config.describe();
    if (halves) result.variant.append(" ").append(to_string(operand)).append(" operands");
    if (validate) {
        double diff2 = 0, ref2 = 0;
        for (std::int64_t i = 0; i < m; i += std::max<std::int64_t>(1, m / 16))
            for (std::int64_t j = 0; j < n; ++j) {
                double ref = 0;
                for (std::int64_t p = 0; p < k; ++p)
                    ref += static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) * b[static_cast<std::size_t>(p * n + j)];
                const double got = c[static_cast<std::size_t>(i * n + j)];
                diff2 += (got - ref) * (got - ref);
                ref2 += ref * ref;
            }
        result.rel_l2_err = std::sqrt(diff2 / std::max(ref2, 1e-300));
    }
    return result;
}

CopyResult benchmark_copy(Context& context, std::uint64_t bytes, const WarmUp& warmup, int repeat, bool validate) {
    if (bytes < 16 || bytes % 16 != 0) throw InvalidArgument("copy", "the bytes copied are a multiple of 16, at least 16.");
    if (repeat < 1) throw InvalidArgument("repeat", "at least one timed repeat is needed.");
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const auto& caps = runtime.device().caps();
    const auto words = static_cast<std::int64_t>(bytes / 4);
    std::vector<std::uint32_t> source(static_cast<std::size_t>(words));
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::uint32_t>(i * 2654435761u);
    // Validation starts each measurement from a zeroed destination, so it sees that copy's own work.
    const std::vector<std::uint32_t> zeros(validate ? source.size() : 0, 0u);
    const DeviceTensor from = detail::own_dense(runtime, DType::i32, {1, 1, 1, words}, "copy source");
    const DeviceTensor to = detail::own_dense(runtime, DType::i32, {1, 1, 1, words}, "copy destination");
    const vk::Buffer &src = detail::TensorAccess::storage(from)->buffer, &dst = detail::TensorAccess::storage(to)->buffer;

    // The shader copy, one dispatch per slice of at most one binding (offsets on the device's
    // storage alignment), each with as many workgroups as one step of its words needs (capped by
    // the grid's x limit; the shader strides over the rest).
    constexpr std::uint64_t kWordsPerGroupStep = 256 * 4;  // copy.comp's WORKGROUP · UNROLL
    const std::uint64_t align = std::lcm<std::uint64_t>(16, std::max<std::uint64_t>(1, caps.min_storage_offset_alignment));
    const std::uint64_t slice = std::min<std::uint64_t>(runtime.max_binding_bytes(), std::uint64_t{1} << 34) / align * align;
    const vk::Kernel& kernel = detail::copy_kernel(runtime);
    detail::Program program(runtime);
    std::uint32_t most_groups = 0;
    for (std::uint64_t offset = 0; offset < bytes; offset += slice) {
        const std::uint64_t range = std::min(slice, bytes - offset), count = range / 16;
        const auto groups = static_cast<std::uint32_t>(
            std::min<std::uint64_t>((count + kWordsPerGroupStep - 1) / kWordsPerGroupStep, caps.max_workgroup_count[0]));
        most_groups = std::max(most_groups, groups);
        program.dispatch({.kernel = &kernel,
                          .params = detail::CopyParams{.count = static_cast<std::uint32_t>(count)},
                          .bindings = {{1, &src, offset, range}, {2, &dst, offset, range}},
                          .groups = {groups, 1, 1}});
    }

    auto measure = [&](auto&& record, bool& valid) {
        std::vector<std::uint32_t> back(validate ? source.size() : 0);
        const std::vector<double> samples = timing::timed_runs(
            runtime, warmup, repeat,
            [&](detail::BatchState& state) {
                detail::write_fresh(state, from, source.data());
                if (validate) detail::write_fresh(state, to, zeros.data());
            },
            record,
            [&](detail::BatchState& state) {
                if (validate)
                    detail::read_back(state, to, make_view(static_cast<void*>(back.data()), DType::i32, Layout::bhnd, to.shape()));
            });
        if (validate) valid = valid && back == source;
        return summarize(samples);
    };
    CopyResult result;
    result.bytes = bytes;
    result.time = measure([&](detail::BatchState&, VkCommandBuffer commands) { program.replay(commands); }, result.valid);
    result.gbps = static_cast<double>(bytes) / (result.time.median_ms * 1e6);
    const VkBufferCopy region{0, 0, bytes};
    result.transfer_time =
        measure([&](detail::BatchState&, VkCommandBuffer commands) { vkCmdCopyBuffer(commands, src.get(), dst.get(), 1, &region); },
                result.valid);
    result.transfer_gbps = static_cast<double>(bytes) / (result.transfer_time.median_ms * 1e6);
    const std::uint64_t slices = (bytes + slice - 1) / slice;
    result.variant = "copy.comp: uvec4 x4 per invocation, 256 per workgroup, " + std::to_string(most_groups) +
                     " workgroups" + (slices > 1 ? " x " + std::to_string(slices) + " bindings" : "");
    return result;
}

}  // namespace vkattn::testing

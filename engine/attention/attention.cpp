// vkattn::attention: validate, choose the path and its variants, run.
#include <thread>

#include "attention/fused.hpp"
#include "attention/path.hpp"
#include "attention/problem.hpp"
#include "attention/tuning.hpp"
#include "attention/unfused.hpp"
#include "runtime.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace detail {

std::unique_ptr<PathRun> plan_attention(Runtime& runtime, const Problem& problem, const AttentionInputs& inputs,
                                        const AttentionOutputs& outputs, const AttentionOptions& options) {
    const auto& caps = runtime.device().caps();
    if (problem.dtype == DType::f16 && !caps.fp16_storage)
        throw InvalidArgument("dtype", "the device " + caps.name +
                                           " does not support 16-bit storage buffers; use f32.");
    std::string why_not_fused;
    const auto fused = choose_fused(caps, problem, inputs.q.strides, inputs.k.strides, inputs.v.strides,
                                    options.variant, &why_not_fused);
    const unsigned threads = std::thread::hardware_concurrency();
    auto unfused = [&] {
        const auto config = choose_unfused(caps, problem, inputs.q.strides, inputs.k.strides, inputs.v.strides,
                                           options.variant);
        return plan_unfused(runtime, problem, inputs, outputs, config);
    };
    switch (options.impl) {
        case Impl::automatic:
            // The weights exist only in the three-stage path; the fused kernels need subgroups and
            // head dimensions up to 512. Otherwise fused, or split-KV when the rows alone cannot
            // fill the device (decoding: few queries, long keys). The report says which ran.
            if (problem.want_weights || !fused) return unfused();
            if (const std::uint32_t splits = choose_splits(caps, problem, *fused, threads); splits >= 2)
                return plan_fused(runtime, problem, inputs, outputs, *fused, splits);
            return plan_fused(runtime, problem, inputs, outputs, *fused, 0);
        case Impl::unfused:
            return unfused();
        case Impl::fused:
        case Impl::split:
            if (problem.want_weights)
                throw InvalidArgument("impl", "the attention weights exist only in the three-stage path; use auto or "
                                              "unfused to get them.");
            if (!fused)
                throw InvalidArgument("impl", "the " + to_string(options.impl) + " path cannot run here: " +
                                                  why_not_fused + ".");
            if (options.impl == Impl::fused) return plan_fused(runtime, problem, inputs, outputs, *fused, 0);
            return plan_fused(runtime, problem, inputs, outputs, *fused,
                              options.splits ? options.splits
                                             : std::max(2u, choose_splits(caps, problem, *fused, threads)));
    }
    throw InvalidArgument("impl", "unknown implementation.");
}

}  // namespace detail

AttentionReport attention(Context& context, const AttentionInputs& inputs, const AttentionOutputs& outputs,
                          const AttentionOptions& options) {
    const detail::Problem problem = detail::resolve(inputs, outputs, options);
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const auto path = detail::plan_attention(runtime, problem, inputs, outputs, options);
    return detail::run_on_host(runtime, problem, inputs, outputs, *path);
}

}  // namespace vkattn

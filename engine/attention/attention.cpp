// vkattn::attention: validate, choose the path and its variants, run.
#include "attention/problem.hpp"
#include "attention/tuning.hpp"
#include "attention/unfused.hpp"
#include "runtime.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {

AttentionReport attention(Context& context, const AttentionInputs& inputs, const AttentionOutputs& outputs,
                          const AttentionOptions& options) {
    const detail::Problem problem = detail::resolve(inputs, outputs, options);
    detail::Runtime& runtime = context.runtime();
    const auto& caps = runtime.device().caps();
    if (problem.dtype == DType::f16 && !caps.fp16_storage)
        throw InvalidArgument("dtype", "the device " + caps.name +
                                           " does not support 16-bit storage buffers; use f32.");
    switch (options.impl) {
        case Impl::automatic:
        case Impl::unfused: {
            const auto config = detail::choose_unfused(caps, problem, inputs.q.strides, inputs.k.strides,
                                                       inputs.v.strides, options.variant);
            return detail::run_unfused(runtime, problem, inputs, outputs, config);
        }
        case Impl::fused:
        case Impl::split:
            throw InvalidArgument("impl", "the " + to_string(options.impl) +
                                              " path is not available in this version; use auto or unfused.");
    }
    throw InvalidArgument("impl", "unknown implementation.");
}

}  // namespace vkattn

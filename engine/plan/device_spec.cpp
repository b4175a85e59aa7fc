// A call on device tensors as a plan's key (AttentionSpec): the tensors' layouts (a paged K/V's
// virtual ones, packed sequences' padded ones), the options, and the texel loads the caller's
// tensors allow.
#include <string>
#include <utility>
#include <vector>

#include "attention/problem.hpp"
#include "plan/paged_kv.hpp"
#include "plan/plan_state.hpp"
#include "plan/varlen.hpp"
#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/plan.hpp"

namespace vkattn {
namespace detail {

AttentionSpec spec_of(const DeviceAttentionInputs& in, const DeviceAttentionOutputs& out,
                              const AttentionOptions& options) {
    detail::AttentionSpec spec;
    auto layout = [](const DeviceTensor& t, const char* name) {
        if (!t.defined()) detail::throw_empty(name);
        return detail::TensorLayout{t.dtype(), t.shape(), t.strides()};
    };
    spec.q = layout(in.q, "q");
    if (in.paged.defined()) {
        if (in.k.defined() || in.v.defined())
            throw InvalidArgument(in.k.defined() ? "k" : "v", "a paged call reads K and V from `paged`; leave k and v empty.");
        if (!in.kv_lengths.defined())
            throw InvalidArgument("kv_lengths", "attention over a paged K/V needs the key lengths (the table holds no length).");
        spec.paged = detail::paged_spec(in.paged);
        const std::int64_t B = in.paged.block_table.shape()[0];
        // Packed queries (varlen) count their sequences in cu_seqlens_q.
        const std::int64_t q_batch = in.varlen.defined() ? in.varlen.cu_seqlens_q.elements() - 1 : in.q.shape()[0];
        if (B != q_batch)
            throw InvalidArgument("paged.block_table", "it has " + std::to_string(B) + " sequences but q's batch is " +
                                                           std::to_string(q_batch) + ".");
        const DeviceTensor& k0 = in.paged.k_pools[0];
        spec.k = detail::paged_layout(*spec.paged, k0.dtype(), B, k0.shape()[2], k0.shape()[3]);
        spec.v = detail::paged_layout(*spec.paged, in.paged.v_pools[0].dtype(), B, k0.shape()[2], in.paged.v_pools[0].shape()[3]);
    } else {
        spec.k = layout(in.k, "k");
        spec.v = layout(in.v, "v");
    }
    spec.o = layout(out.o, "o");
    if (in.varlen.defined()) apply_varlen(spec, in);
    spec.kv_lengths = in.kv_lengths.defined();
    if (in.bool_mask.defined()) spec.bool_mask = std::vector<std::int64_t>(in.bool_mask.shape().begin(), in.bool_mask.shape().end());
    if (in.float_mask.defined())
        spec.float_mask = std::vector<std::int64_t>(in.float_mask.shape().begin(), in.float_mask.shape().end());
    spec.weights = out.weights.defined();
    spec.lse = out.lse.defined();
    spec.logits = out.logits.defined();
    spec.alibi_slopes.assign(in.alibi_slopes.begin(), in.alibi_slopes.end());
    spec.sinks.assign(in.sinks.begin(), in.sinks.end());
    spec.k_scale.assign(in.k_scale.begin(), in.k_scale.end());
    spec.v_scale.assign(in.v_scale.begin(), in.v_scale.end());
    spec.options = options;
    // Texel loads need rows at multiples of 4 elements; tensors that start elsewhere get the
    // scalar loads unless the caller forces texels (then the run says why it cannot).
    // The caller's buffers without texel views (wrap) get them too; forcing texels on them is refused.
    std::vector<std::pair<const DeviceTensor*, std::string>> read{{&in.q, "q"}, {&in.k, "k"}, {&in.v, "v"}};
    for (std::size_t i = 0; i < in.paged.k_pools.size(); ++i) read.emplace_back(&in.paged.k_pools[i], "paged.k_pools[" + std::to_string(i) + "]");
    for (std::size_t i = 0; i < in.paged.v_pools.size(); ++i) read.emplace_back(&in.paged.v_pools[i], "paged.v_pools[" + std::to_string(i) + "]");
    for (const auto& [t, name] : read) {
        if (!t->defined()) continue;
        if (detail::element_base(*t) % 4 != 0 && !spec.options.variant.texel_loads)
            spec.options.variant.texel_loads = false;
        const auto& storage = detail::TensorAccess::storage(*t);
        if (!storage->texel_views()) {
            if (spec.options.variant.texel_loads == true)
                detail::require_usage(*storage, VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT, name.c_str(),
                                      "texel loads (forced by variant.texel_loads)");
            spec.options.variant.texel_loads = false;
        }
    }
    return spec;
}

}  // namespace detail

}  // namespace vkattn

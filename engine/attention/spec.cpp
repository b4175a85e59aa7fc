// A request as a plan's key (attention/problem.hpp's AttentionSpec): the tensors' types, shapes and
// strides and every option, without the data.
#include <string>

#include "attention/problem.hpp"

namespace vkattn::detail {

AttentionSpec spec_of(const AttentionInputs& in, const AttentionOutputs& out, const AttentionOptions& options) {
    AttentionSpec spec;
    spec.q = {in.q.dtype, in.q.shape, in.q.strides};
    spec.k = {in.k.dtype, in.k.shape, in.k.strides};
    spec.v = {in.v.dtype, in.v.shape, in.v.strides};
    spec.o = {out.o.dtype, out.o.shape, out.o.strides};
    spec.kv_lengths = !in.kv_lengths.empty();
    if (in.bool_mask) spec.bool_mask = in.bool_mask->shape;
    if (in.float_mask) spec.float_mask = in.float_mask->shape;
    spec.weights = out.weights != nullptr;
    spec.lse = out.lse != nullptr;
    spec.logits = out.logits != nullptr;
    spec.alibi_slopes.assign(in.alibi_slopes.begin(), in.alibi_slopes.end());
    spec.sinks.assign(in.sinks.begin(), in.sinks.end());
    spec.k_scale.assign(in.k_scale.begin(), in.k_scale.end());
    spec.v_scale.assign(in.v_scale.begin(), in.v_scale.end());
    spec.options = options;
    return spec;
}

std::string AttentionSpec::key() const {
    std::string key;
    auto put = [&](const auto& value) {
        key.append(reinterpret_cast<const char*>(&value), sizeof(value));
    };
    for (const TensorLayout* t : {&q, &k, &v, &o}) {
        put(t->dtype);
        put(t->shape);
        put(t->strides);
    }
    put(paged.has_value());
    if (paged) put(*paged);
    put(varlen.has_value());
    if (varlen)
        for (const TensorLayout* t : {&varlen->q, &varlen->o, varlen->k ? &*varlen->k : nullptr, varlen->v ? &*varlen->v : nullptr}) {
            put(t != nullptr);
            if (!t) continue;
            put(t->dtype);
            put(t->shape);
            put(t->strides);
        }
    put(kv_lengths);
    put(weights);
    put(lse);
    put(logits);
    for (const auto* mask : {&bool_mask, &float_mask}) {
        put(mask->has_value());
        if (*mask) {
            put((*mask)->size());
            for (const std::int64_t d : **mask) put(d);
        }
    }
    for (const auto* values : {&alibi_slopes, &sinks, &k_scale, &v_scale}) {
        put(values->size());
        for (const float x : *values) put(x);
    }
    const AttentionOptions& opt = options;
    put(opt.scale.has_value());
    put(opt.scale.value_or(0.0));
    put(opt.causal);
    put(opt.causal_offset.has_value());
    put(opt.causal_offset.value_or(0));
    put(opt.diagonal_offset);
    put(opt.diagonal_bottom_right);
    put(opt.window.left);
    put(opt.window.right);
    put(opt.softcap.has_value());
    put(opt.softcap.value_or(0.0));
    put(opt.alibi_max_bias.has_value());
    put(opt.alibi_max_bias.value_or(0.0));
    put(opt.dropout);
    put(opt.seed);
    put(opt.impl);
    for (const auto* variant : {&opt.variant.texel_loads, &opt.variant.shared_tiles, &opt.variant.subgroup_ops,
                                &opt.variant.named_accumulators, &opt.variant.q_in_shared, &opt.variant.kv_apart,
                                &opt.variant.workgroup_matrices}) {
        put(variant->has_value());
        put(variant->value_or(false));
    }
    put(opt.variant.fused_kernel.has_value());
    put(opt.variant.fused_kernel.value_or(FusedKernel::flash));
    put(opt.variant.gemm_kernel.has_value());
    put(opt.variant.gemm_kernel.value_or(GemmKernel::blocks));
    put(opt.variant.gemm_shape.has_value());  // refused wherever a plan is made: no cached plan may answer it
    for (const auto* knob : {&opt.variant.tile_rows, &opt.variant.tile_keys, &opt.variant.decode_lanes_per_key,
                              &opt.variant.row_tiles}) {
        put(knob->has_value());
        put(knob->value_or(0));
    }
    put(opt.splits);
    put(opt.logits_stage);
    for (const std::int64_t x : {opt.block.batch, opt.block.head, opt.block.query, opt.block.key, opt.block.queries,
                                 opt.block.keys})
        put(x);
    return key;
}

}  // namespace vkattn::detail

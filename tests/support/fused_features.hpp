// The four feature sets that the fused kernels' variant tests (flash.comp's staged and streamed
// layouts, flash_tile.comp) run over, for a case of B 2, Hq 6, Nq 37, Nkv 150: rows whose key ranges
// differ inside a workgroup (causal, windows, lengths, masks), sinks, softcap, ALiBi and dropout.
#pragma once

#include <cstdint>
#include <vector>

#include "support/catch.hpp"

#include <string>

#include "support/expect_case.hpp"
#include "vkattn/testing/attention_case.hpp"

namespace vkattn::test {

constexpr int kFusedFeatureSets = 4;

// The shape the feature sets' masks are built for.
inline testing::Case fused_feature_case() {
    testing::Case c;
    c.B = 2;
    c.Hq = 6;
    c.Hkv = 2;
    c.Nq = 37;
    c.Nkv = 150;
    return c;
}

inline void apply_fused_features(testing::Case& c, int features) {
    switch (features) {
    case 0: c.causal = Causal::bottom_right; break;
    case 1:
        c.kv_lengths = true;
        c.window = {20, 3};
        c.sinks = true;
        break;
    case 2:
        c.bool_mask_shape = std::vector<std::int64_t>{2, 6, 37, 150};
        c.float_mask_shape = std::vector<std::int64_t>{2, 1, 1, 150};
        c.softcap = 30.0;
        c.window = {40, 10};  // rows start at different keys inside the workgroup's shared range
        break;
    case 3:
        c.causal = Causal::top_left;
        c.alibi_max_bias = 8.0;
        c.dropout = 0.2;
        c.dropout_seed = 7;
        break;
    }
}

// The feature case with a GPU fused kernel forced (flash_tile.comp, flash_coopmat.comp), on `impl`
// (fused, or split in 3) without the weights.
inline testing::Case forced_kernel_case(FusedKernel kernel, Impl impl, DType dtype) {
    testing::Case c = fused_feature_case();
    c.dtype = dtype;
    c.weights = false;
    c.impl = impl;
    c.splits = impl == Impl::split ? 3 : 0;
    c.variant.fused_kernel = kernel;
    return c;
}

// flash_coopmat.comp forced over several key tiles: f16 heads of width d (70 queries, 333 keys),
// GQA 4/2, a causal diagonal; where the units' staging and accumulator faults showed. `variant`
// adds its layout knobs (the catalogue's overrides).
inline testing::Case several_key_tiles_case(Impl impl, std::int64_t d, const VariantOverrides& variant = {}) {
    testing::Case c = forced_kernel_case(FusedKernel::coopmat, impl, DType::f16);
    if (variant.fused_kernel) c.variant = variant;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = 70;
    c.Nkv = 333;
    c.Dk = c.Dv = d;
    c.causal = Causal::bottom_right;
    return c;
}

// `c` with q and k of magnitude up to 10⁶ (f16 tops out at 65,504), the scale bringing the scores
// back to the unit range: what only bf16 operands keep finite. GQA 4/2, 40 queries, 90 keys, heads
// of 32.
inline testing::Case past_f16_range(testing::Case c) {
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = 40;
    c.Nkv = 90;
    c.Dk = c.Dv = 32;
    c.amplitude = 1.0e6f;
    c.scale = 1.0e-12;
    return c;
}

// Runs the case, checked against the reference, and checks that the forced kernel ran.
inline AttentionReport expect_kernel(const testing::Case& c) {
    const AttentionReport r = expect_pass(c, c.impl);
    CHECK_THAT(r.variant, Catch::StartsWith(to_string(*c.variant.fused_kernel) + "["));
    return r;
}

// expect_kernel for flash_coopmat.comp, whose products multiply f16 operands, or bf16 ones where q,
// k or v is stored as bf16.
inline AttentionReport expect_coopmat(const testing::Case& c) {
    const AttentionReport r = expect_kernel(c);
    const bool bf16 = c.dtype == DType::bf16 || c.k_dtype == DType::bf16 || c.v_dtype == DType::bf16;
    CHECK(r.product_type == (bf16 ? DType::bf16 : DType::f16));
    return r;
}

// Every feature set at one head shape (Dk, Dv): each shape and path is a pipeline, which the
// feature sets share. Heads wider than a pass's columns must take column passes.
inline void expect_every_feature(const testing::Case& base, std::int64_t dk, std::int64_t dv, std::int64_t pass_columns) {
    for (int features = 0; features < kFusedFeatureSets; ++features) {
        testing::Case c = base;
        c.Dk = dk;
        c.Dv = dv;
        apply_fused_features(c, features);
        INFO("Dk " << dk << " Dv " << dv << ", features " << features);
        const AttentionReport r = expect_kernel(c);
        if (dv > pass_columns) CHECK_THAT(r.variant, Catch::Contains(" passes="));
    }
}

}  // namespace vkattn::test

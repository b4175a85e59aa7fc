// The four feature sets that the fused kernels' variant tests (flash.comp's staged and streamed
// layouts, flash_tile.comp) run over, for a case of B 2, Hq 6, Nq 37, Nkv 150: rows whose key ranges
// differ inside a workgroup (causal, windows, lengths, masks), sinks, softcap, ALiBi and dropout.
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace vkattn::test

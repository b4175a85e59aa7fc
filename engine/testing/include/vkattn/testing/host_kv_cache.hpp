// A host model of a KV cache: what a sequence of appends leaves, contiguous and in the cache's
// dtype. The cache tests check the device caches (contiguous and paged) against it, and it feeds
// the CPU reference in those tests and in vk-attn decode.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vkattn/testing/random.hpp"

namespace vkattn::testing {

struct HostKvCache {
    HostTensor k, v;  // [B, Hkv, capacity, Dk] and [..., Dv], bhnd, zeros where nothing was appended
    std::vector<std::int32_t> lengths;

    HostKvCache(DType dtype, std::int64_t batch, std::int64_t kv_heads, std::int64_t capacity, std::int64_t dim,
                std::int64_t dim_v)
        : k(zero_tensor(dtype, Layout::bhnd, {batch, kv_heads, capacity, dim})),
          v(zero_tensor(dtype, Layout::bhnd, {batch, kv_heads, capacity, dim_v})),
          lengths(static_cast<std::size_t>(batch), 0) {}

    // Row t < counts[b] (every row when counts is empty) of sequence b's new rows goes to row
    // lengths[b] + t, rounded once to the cache's dtype; then lengths[b] += counts[b].
    void append(const HostTensor& k_new, const HostTensor& v_new, std::span<const std::int32_t> counts = {}) {
        for (std::int64_t b = 0; b < k.shape[0]; ++b) {
            const auto bi = static_cast<std::size_t>(b);
            const std::int64_t count = counts.empty() ? k_new.shape[2] : counts[bi];
            for (auto [to, from] : {std::pair{&k, &k_new}, std::pair{&v, &v_new}})
                for (std::int64_t h = 0; h < to->shape[1]; ++h)
                    for (std::int64_t t = 0; t < count; ++t)
                        for (std::int64_t d = 0; d < to->shape[3]; ++d) {
                            const auto at = static_cast<std::size_t>(to->view().offset(b, h, lengths[bi] + t, d));
                            const float x = from->at(b, h, t, d);
                            if (to->dtype == DType::f32) to->f32[at] = x;
                            else if (from->dtype == DType::f16) to->f16[at] = from->f16[static_cast<std::size_t>(from->view().offset(b, h, t, d))];
                            else to->f16[at] = float_to_half(x);
                        }
            lengths[bi] += static_cast<std::int32_t>(count);
        }
    }
};

}  // namespace vkattn::testing

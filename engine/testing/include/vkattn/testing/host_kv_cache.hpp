// A host model of a KV cache: what a sequence of appends leaves, contiguous and in the cache's
// dtype. The cache tests check the device caches (contiguous and paged) against it, and it feeds
// the CPU reference in those tests and in vk-attn decode.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/testing/random.hpp"

namespace vkattn::testing {

struct HostKvCache {
    HostTensor k, v;  // [B, Hkv, capacity, Dk] and [..., Dv], bhnd, zeros where nothing was appended
    std::vector<std::int32_t> lengths;
    std::vector<float> k_scale, v_scale;  // fp8: [1] or [Hkv], as the cache's options; empty = 1

    HostKvCache(DType dtype, std::int64_t batch, std::int64_t kv_heads, std::int64_t capacity, std::int64_t dim,
                std::int64_t dim_v, std::optional<DType> dtype_v = {}, std::vector<float> k_scales = {},
                std::vector<float> v_scales = {})
        : k(zero_tensor(dtype, Layout::bhnd, {batch, kv_heads, capacity, dim})),
          v(zero_tensor(dtype_v.value_or(dtype), Layout::bhnd, {batch, kv_heads, capacity, dim_v})),
          lengths(static_cast<std::size_t>(batch), 0),
          k_scale(std::move(k_scales)),
          v_scale(std::move(v_scales)) {}

    // The attention inputs of q over the cache (the reference's): its rows, lengths and scales.
    AttentionInputs inputs(const HostTensor& q) const {
        return {.q = q.view(), .k = k.view(), .v = v.view(), .kv_lengths = lengths, .k_scale = k_scale, .v_scale = v_scale};
    }

    // Row t < counts[b] (every row when counts is empty) of sequence b's new rows goes to row
    // lengths[b] + t, stored once in the cache's dtype (rounded, or quantized as ggml does, by
    // vkattn::quantize_row); then lengths[b] += counts[b].
    void append(const HostTensor& k_new, const HostTensor& v_new, std::span<const std::int32_t> counts = {}) {
        for (std::int64_t b = 0; b < k.shape[0]; ++b) {
            const auto bi = static_cast<std::size_t>(b);
            const std::int64_t count = counts.empty() ? k_new.shape[2] : counts[bi];
            for (auto [to, from, scales] : {std::tuple{&k, &k_new, &k_scale}, std::tuple{&v, &v_new, &v_scale}})
                for (std::int64_t h = 0; h < to->shape[1]; ++h)
                    for (std::int64_t t = 0; t < count; ++t) {
                        const float scale = scales->empty() ? 1.0f : (*scales)[scales->size() == 1 ? 0 : static_cast<std::size_t>(h)];
                        const std::int64_t D = to->shape[3];
                        std::vector<float> row(static_cast<std::size_t>(D));
                        for (std::int64_t d = 0; d < D; ++d) row[static_cast<std::size_t>(d)] = from->at(b, h, t, d);
                        const std::int64_t at = to->view().offset(b, h, lengths[bi] + t, 0);
                        auto* base = static_cast<std::uint8_t*>(const_cast<void*>(to->data()));
                        quantize_row(to->dtype, row, {base + storage_bytes(to->dtype, at), row_bytes(to->dtype, D)}, scale);
                    }
            lengths[bi] += static_cast<std::int32_t>(count);
        }
    }
};

}  // namespace vkattn::testing

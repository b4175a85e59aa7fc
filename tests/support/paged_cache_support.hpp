// What the paged KV-cache tests share (tests/gpu/test_paged_kv_cache.cpp, test_paged_decode.cpp):
// random block tables.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "vkattn/vkattn.hpp"

namespace vkattn::test {

// A table naming `entries[b]` distinct random blocks for sequence b (out of num_blocks), -1 after.
inline std::vector<std::int32_t> shuffled_table(std::mt19937& rng, const PagedKvCacheOptions& o,
                                                const std::vector<std::int64_t>& entries) {
    std::vector<std::int32_t> blocks(static_cast<std::size_t>(o.num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<std::int32_t> table(static_cast<std::size_t>(o.batch * o.max_blocks_per_seq), -1);
    std::size_t next = 0;
    for (std::size_t b = 0; b < entries.size(); ++b)
        for (std::int64_t e = 0; e < entries[b]; ++e)
            table[b * static_cast<std::size_t>(o.max_blocks_per_seq) + static_cast<std::size_t>(e)] = blocks.at(next++);
    return table;
}

}  // namespace vkattn::test

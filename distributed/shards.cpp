// Which rows of the whole sequence each rank holds (vkattn/distributed.hpp, Sharding).
#include <numeric>

#include "vkattn/distributed.hpp"

namespace vkattn::distributed {

std::vector<Segment> shard_segments(Sharding sharding, std::int64_t total, const std::vector<std::int64_t>& lengths,
                                    int rank) {
    const auto P = static_cast<std::int64_t>(lengths.size());
    const auto r = static_cast<std::int64_t>(rank);
    if (sharding == Sharding::contiguous) {
        const std::int64_t first =
            std::accumulate(lengths.begin(), lengths.begin() + rank, std::int64_t{0});
        return {{first, lengths[static_cast<std::size_t>(rank)]}};
    }
    // Chunk c of 2P: rows [floor(N·c / 2P), floor(N·(c+1) / 2P)).
    auto chunk = [&](std::int64_t c) {
        const std::int64_t begin = total * c / (2 * P), end = total * (c + 1) / (2 * P);
        return Segment{begin, end - begin};
    };
    return {chunk(r), chunk(2 * P - 1 - r)};
}

}  // namespace vkattn::distributed

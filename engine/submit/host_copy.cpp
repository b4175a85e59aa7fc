#include "submit/host_copy.hpp"

namespace vkattn::detail {

std::vector<CopyRun> row_runs(const DeviceTensor& t, const std::array<std::int64_t, 4>& host_strides) {
    const auto& shape = t.shape();
    const auto& strides = t.strides();
    // Offsets of rows (whole blocks for block types), in bytes.
    auto bytes = [&](std::int64_t elements) { return storage_bytes(t.dtype(), elements); };
    const std::uint64_t row_bytes = bytes(shape[3]);
    std::vector<CopyRun> runs;
    std::uint64_t packed = 0;
    for (std::int64_t b = 0; b < shape[0]; ++b)
        for (std::int64_t h = 0; h < shape[1]; ++h)
            for (std::int64_t n = 0; n < shape[2]; ++n) {
                const std::uint64_t device =
                    t.offset_bytes() + bytes(b * strides[0] + h * strides[1] + n * strides[2]);
                const std::uint64_t host = bytes(b * host_strides[0] + h * host_strides[1] + n * host_strides[2]);
                if (!runs.empty()) {
                    CopyRun& last = runs.back();
                    if (last.device + last.bytes == device && last.host + last.bytes == host) {
                        last.bytes += row_bytes;
                        packed += row_bytes;
                        continue;
                    }
                }
                runs.push_back({device, host, packed, row_bytes});
                packed += row_bytes;
            }
    return runs;
}

}  // namespace vkattn::detail

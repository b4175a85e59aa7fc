// Copies between a device tensor and a host view with their own strides: the rows (b, h, n) of D
// elements in [B, H, N] order, merged into runs wherever consecutive rows are adjacent on both
// sides, with the packed offset each run has in a staging buffer.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "vkattn/device_tensor.hpp"

namespace vkattn::detail {

struct CopyRun {
    std::uint64_t device;  // byte offset in the tensor's buffer
    std::uint64_t host;    // byte offset from the host view's data pointer
    std::uint64_t packed;  // byte offset in a packed [B, H, N, D] staging buffer
    std::uint64_t bytes;
};

std::vector<CopyRun> row_runs(const DeviceTensor& tensor, const std::array<std::int64_t, 4>& host_strides);

// Bytes of the tensor's elements packed densely.
inline std::uint64_t packed_bytes(const DeviceTensor& t) {
    return storage_bytes(t.dtype(), t.elements());
}

}  // namespace vkattn::detail

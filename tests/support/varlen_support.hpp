// Variable-length batches' offsets (cu_seqlens) for the varlen tests: from sequence lengths, and on
// the device as the i32 tensor DeviceVarlen takes.
#pragma once

#include <cstdint>
#include <vector>

#include "vkattn/vkattn.hpp"

namespace vkattn::test {

inline std::vector<std::int32_t> offsets_of(const std::vector<std::int64_t>& lengths) {
    std::vector<std::int32_t> cu{0};
    for (const std::int64_t n : lengths) cu.push_back(cu.back() + static_cast<std::int32_t>(n));
    return cu;
}

inline DeviceTensor cu_tensor(Context& ctx, const std::vector<std::int32_t>& cu) {
    return DeviceTensor::from_host(ctx, make_view(static_cast<const void*>(cu.data()), DType::i32, Layout::bhnd,
                                                  {1, 1, 1, static_cast<std::int64_t>(cu.size())}));
}

}  // namespace vkattn::test

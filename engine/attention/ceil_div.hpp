// Whole blocks of b that cover a (a ≥ 0, b > 0): tiles over a head, loop trips, column passes.
#pragma once

#include <cstdint>

namespace vkattn::detail {

constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace vkattn::detail

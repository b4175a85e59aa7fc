// Whole-string integer parsing for flag values: "12" yes, "12x", "" and out-of-range no. Callers
// check the bounds their flag needs and name the flag in their own message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace vkattn::tool {

inline std::optional<std::int64_t> parse_integer(const std::string& text) {
    std::size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(text, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (used != text.size()) return std::nullopt;
    return static_cast<std::int64_t>(value);
}

}  // namespace vkattn::tool

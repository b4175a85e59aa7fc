// The --impl flag of every subcommand: auto, unfused, fused or split.
#pragma once

#include <string>

#include "vkattn/attention.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::tool {

inline Impl parse_impl(const std::string& s) {
    if (s == "auto") return Impl::automatic;
    if (s == "unfused") return Impl::unfused;
    if (s == "fused") return Impl::fused;
    if (s == "split") return Impl::split;
    throw InvalidArgument("--impl", "must be auto, unfused, fused or split, not \"" + s + "\".");
}

}  // namespace vkattn::tool

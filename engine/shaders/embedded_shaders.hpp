// The SPIR-V of every shader variant, embedded at build time (see cmake/EmbedSpirv.cmake).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace vkattn::shaders {

struct EmbeddedShader {
    std::string_view name;
    const std::uint32_t* words;
    std::size_t count;
};

std::span<const EmbeddedShader> embedded();

}  // namespace vkattn::shaders

#include "vk/spirv_float_controls.hpp"

#include <string>

#include "vkattn/errors.hpp"

namespace vkattn::vk {
namespace {

constexpr std::uint32_t kMagic = 0x07230203u;
constexpr std::uint32_t kOpCapability = 17, kOpEntryPoint = 15, kOpExecutionMode = 16;
constexpr std::uint32_t kCapabilitySignedZeroInfNanPreserve = 4466;
constexpr std::uint32_t kModeSignedZeroInfNanPreserve = 4461;

}  // namespace

std::vector<std::uint32_t> preserve_inf_nan_f32(std::span<const std::uint32_t> spirv) {
    if (spirv.size() < 5 || spirv[0] != kMagic) throw Error("internal: not a SPIR-V module.");
    if (((spirv[1] >> 16) & 0xff) < 1 || (((spirv[1] >> 16) & 0xff) == 1 && ((spirv[1] >> 8) & 0xff) < 4))
        throw Error("internal: SignedZeroInfNanPreserve needs SPIR-V 1.4 or later.");
    // Instructions come in a fixed order: capabilities first, entry points before execution modes.
    std::vector<std::uint32_t> out(spirv.begin(), spirv.begin() + 5);
    std::vector<std::uint32_t> entry_points;
    bool capability_added = false, modes_added = false;
    for (std::size_t at = 5; at < spirv.size();) {
        const std::uint32_t words = spirv[at] >> 16, opcode = spirv[at] & 0xffff;
        if (words == 0 || at + words > spirv.size()) throw Error("internal: malformed SPIR-V instruction.");
        if (!capability_added && opcode != kOpCapability) {
            out.insert(out.end(), {(2u << 16) | kOpCapability, kCapabilitySignedZeroInfNanPreserve});
            capability_added = true;
        }
        const bool past_entry_points = !entry_points.empty() && opcode != kOpEntryPoint;
        if (!modes_added && past_entry_points) {
            for (const std::uint32_t id : entry_points)
                out.insert(out.end(), {(4u << 16) | kOpExecutionMode, id, kModeSignedZeroInfNanPreserve, 32u});
            modes_added = true;
        }
        if (opcode == kOpEntryPoint) entry_points.push_back(spirv[at + 2]);
        out.insert(out.end(), spirv.begin() + static_cast<std::ptrdiff_t>(at),
                   spirv.begin() + static_cast<std::ptrdiff_t>(at + words));
        at += words;
    }
    if (!modes_added) throw Error("internal: the SPIR-V module has no entry point.");
    return out;
}

}  // namespace vkattn::vk

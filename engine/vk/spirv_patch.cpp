#include "vk/spirv_patch.hpp"
#include "vk/spirv_reflect.hpp"

#include <string>

#include "vkattn/errors.hpp"

namespace vkattn::vk {
namespace {

constexpr std::uint32_t kOpExtension = 10, kOpCapability = 17, kOpEntryPoint = 15, kOpExecutionMode = 16;
constexpr std::uint32_t kCapabilitySignedZeroInfNanPreserve = 4466;
constexpr std::uint32_t kModeSignedZeroInfNanPreserve = 4461;
constexpr std::uint32_t kModeMaximallyReconvergesKHR = 6023;

// OpExtension with its name as a SPIR-V literal string: UTF-8, NUL-terminated, little-endian words.
std::vector<std::uint32_t> extension_instruction(const std::string& name) {
    std::vector<std::uint32_t> words(1 + (name.size() + 4) / 4, 0u);
    for (std::size_t i = 0; i < name.size(); ++i)
        words[1 + i / 4] |= static_cast<std::uint32_t>(static_cast<unsigned char>(name[i])) << (8 * (i % 4));
    words[0] = (static_cast<std::uint32_t>(words.size()) << 16) | kOpExtension;
    return words;
}

bool at_least(std::uint32_t version_word, std::uint32_t major, std::uint32_t minor) {
    const std::uint32_t have_major = (version_word >> 16) & 0xff, have_minor = (version_word >> 8) & 0xff;
    return have_major > major || (have_major == major && have_minor >= minor);
}

}  // namespace

std::vector<std::uint32_t> patch_spirv(std::span<const std::uint32_t> spirv, const SpirvPatch& patch) {
    if (spirv.size() < 5 || spirv[0] != kSpirvMagic) throw Error("internal: not a SPIR-V module.");
    if (patch.preserve_inf_nan_f32 && !at_least(spirv[1], 1, 4))
        throw Error("internal: SignedZeroInfNanPreserve needs SPIR-V 1.4 or later.");
    if (patch.maximal_reconvergence && !at_least(spirv[1], 1, 3))
        throw Error("internal: MaximallyReconvergesKHR needs SPIR-V 1.3 or later.");
    // Instructions come in a fixed order: capabilities, extensions, ..., entry points, execution modes.
    std::vector<std::uint32_t> header;
    if (patch.preserve_inf_nan_f32) header.insert(header.end(), {(2u << 16) | kOpCapability, kCapabilitySignedZeroInfNanPreserve});
    if (patch.maximal_reconvergence) {
        const auto extension = extension_instruction("SPV_KHR_maximal_reconvergence");
        header.insert(header.end(), extension.begin(), extension.end());
    }
    std::vector<std::uint32_t> out(spirv.begin(), spirv.begin() + 5);
    std::vector<std::uint32_t> entry_points;
    bool header_added = false, modes_added = false;
    for (std::size_t at = 5; at < spirv.size();) {
        const std::uint32_t words = spirv[at] >> 16, opcode = spirv[at] & 0xffff;
        if (words == 0 || at + words > spirv.size()) throw Error("internal: malformed SPIR-V instruction.");
        if (!header_added && opcode != kOpCapability) {
            out.insert(out.end(), header.begin(), header.end());
            header_added = true;
        }
        const bool past_entry_points = !entry_points.empty() && opcode != kOpEntryPoint;
        if (!modes_added && past_entry_points) {
            for (const std::uint32_t id : entry_points) {
                if (patch.preserve_inf_nan_f32)
                    out.insert(out.end(), {(4u << 16) | kOpExecutionMode, id, kModeSignedZeroInfNanPreserve, 32u});
                if (patch.maximal_reconvergence)
                    out.insert(out.end(), {(3u << 16) | kOpExecutionMode, id, kModeMaximallyReconvergesKHR});
            }
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

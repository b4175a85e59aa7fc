#include "vk/spirv_reflect.hpp"

#include <algorithm>
#include <map>

#include "vkattn/errors.hpp"

namespace vkattn::vk {
namespace {

// The few opcodes, decorations and storage classes we read (SPIR-V 1.x specification, section 3).
constexpr std::uint32_t OpTypeImage = 25, OpTypeSampledImage = 27, OpTypeStruct = 30,
                        OpTypePointer = 32, OpVariable = 59, OpDecorate = 71;
constexpr std::uint32_t DecorationBlock = 2, DecorationBufferBlock = 3, DecorationBinding = 33,
                        DecorationDescriptorSet = 34;
constexpr std::uint32_t StorageUniformConstant = 0, StorageUniform = 2, StorageStorageBuffer = 12;
constexpr std::uint32_t DimBuffer = 5;

}  // namespace

std::vector<ReflectedBinding> reflect_bindings(std::span<const std::uint32_t> spirv) {
    if (spirv.size() < 5 || spirv[0] != kSpirvMagic) throw Error("internal: an embedded shader is not SPIR-V.");
    std::map<std::uint32_t, std::uint32_t> binding_of, set_of;
    std::map<std::uint32_t, bool> block, buffer_block;
    std::map<std::uint32_t, std::uint32_t> pointee;          // pointer type -> pointee type
    std::map<std::uint32_t, std::uint32_t> sampled_image;    // sampled image type -> image type
    std::map<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>> image;  // image -> (dim, sampled)
    std::map<std::uint32_t, bool> is_struct;
    std::vector<std::pair<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>>> variables;  // id, (type, class)

    for (std::size_t i = 5; i < spirv.size();) {
        const std::uint32_t count = spirv[i] >> 16, op = spirv[i] & 0xffff;
        if (count == 0 || i + count > spirv.size()) throw Error("internal: truncated SPIR-V.");
        const std::uint32_t* w = &spirv[i];
        switch (op) {
            case OpDecorate:
                if (w[2] == DecorationBinding) binding_of[w[1]] = w[3];
                if (w[2] == DecorationDescriptorSet) set_of[w[1]] = w[3];
                if (w[2] == DecorationBlock) block[w[1]] = true;
                if (w[2] == DecorationBufferBlock) buffer_block[w[1]] = true;
                break;
            case OpTypeStruct: is_struct[w[1]] = true; break;
            case OpTypePointer: pointee[w[1]] = w[3]; break;
            case OpTypeSampledImage: sampled_image[w[1]] = w[2]; break;
            case OpTypeImage: image[w[1]] = {w[3], w[7]}; break;
            case OpVariable: variables.push_back({w[2], {w[1], w[3]}}); break;
            default: break;
        }
        i += count;
    }

    std::vector<ReflectedBinding> out;
    for (const auto& [id, type_and_class] : variables) {
        if (!binding_of.count(id)) continue;
        if (set_of.count(id) && set_of[id] != 0)
            throw Error("internal: vkattn shaders use descriptor set 0 only.");
        const auto [pointer_type, storage] = type_and_class;
        std::uint32_t type = pointee[pointer_type];
        // Arrays of descriptors are not used by vkattn; a struct or an image is expected here.
        ReflectedBinding b;
        b.binding = binding_of[id];
        if (storage == StorageStorageBuffer || (storage == StorageUniform && buffer_block[type])) {
            b.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        } else if (storage == StorageUniform && block[type]) {
            b.type = VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER;
        } else if (storage == StorageUniformConstant && sampled_image.count(type) &&
                   image[sampled_image[type]].first == DimBuffer) {
            b.type = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
        } else if (storage == StorageUniformConstant && image.count(type) && image[type].first == DimBuffer &&
                   image[type].second == 2) {
            b.type = VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER;
        } else {
            throw Error("internal: a shader binding " + std::to_string(b.binding) +
                        " is of a descriptor kind vkattn does not use.");
        }
        out.push_back(b);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.binding < b.binding; });
    // Variables may alias one binding (a buffer read as words and as uvec4s): one descriptor, which
    // must then be of one kind.
    std::vector<ReflectedBinding> unique;
    for (const ReflectedBinding& b : out) {
        if (!unique.empty() && unique.back().binding == b.binding) {
            if (unique.back().type != b.type)
                throw Error("internal: shader variables of different descriptor kinds share binding " +
                            std::to_string(b.binding) + ".");
            continue;
        }
        unique.push_back(b);
    }
    return unique;
}

}  // namespace vkattn::vk

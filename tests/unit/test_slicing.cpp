// Slicing and SPIR-V patching are pure: check them without a device.
#include "support/catch.hpp"

#include <algorithm>
#include <string>

#include "attention/slicing.hpp"
#include "vk/pipeline.hpp"
#include "vk/spirv_patch.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::detail;

namespace {

// What tensor_index (params.glsl) computes, in 32-bit unsigned arithmetic as the shaders do.
std::uint32_t tensor_index(const TensorDesc& t, std::uint32_t b, std::uint32_t h, std::uint32_t n) {
    return (b - t.origin[0]) * t.stride[0] + (h - t.origin[1]) * t.stride[1] + (n - t.origin[2]) * t.stride[2] +
           t.origin[3];
}

}  // namespace

TEST_CASE("slicing: key slices cover the keys in order, the last one shorter", "[unit][slicing]") {
    const auto s = key_slices(701, 128);
    REQUIRE(s.size() == 6);
    CHECK(s.front().begin == 0);
    CHECK(s.back().begin == 640);
    CHECK(s.back().length == 61);
    CHECK(key_slices(0, 64).size() == 1);
}

TEST_CASE("slicing: every indexing mode lands on the elements the box and keys name", "[unit][slicing]") {
    // A [2, 3, 50, 40] tensor (b, h, n, feature); the box holds b 1, h 1..2, rows 10..19, features
    // 16..31 (a key slice of a score or mask row).
    const std::array<std::int64_t, 4> strides{3 * 50 * 40, 50 * 40, 40, 1};
    const Box box{1, 1, 1, 2, 10, 19};
    const Features keys{16, 16};
    const std::uint64_t bytes = 2 * 3 * 50 * 40 * 4;
    for (const std::int64_t base : {std::int64_t{0}, std::int64_t{-1 * 3 * 50 * 40}}) {
        auto element = [&](std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t f) {
            return base + b * strides[0] + h * strides[1] + n * strides[2] + f;
        };
        const Slice absolute = slice_of(strides, keys, box, 4, 64, bytes, Indexing::absolute, base);
        const Slice rows = slice_of(strides, keys, box, 4, 64, bytes, Indexing::relative_rows, base);
        const Slice features = slice_of(strides, keys, box, 4, 64, bytes, Indexing::relative_features, base);
        CHECK(absolute.offset % 64 == 0);
        for (std::uint32_t h = 1; h <= 2; ++h)
            for (std::uint32_t n = 10; n <= 19; ++n)
                for (std::uint32_t f = 16; f < 32; ++f) {
                    const auto want = static_cast<std::uint32_t>(element(1, h, n, f) - static_cast<std::int64_t>(absolute.offset / 4));
                    CHECK(tensor_index(absolute.desc, 1, h, n) + f == want);
                    CHECK(tensor_index(rows.desc, 1, h, n - 10) + f == want);
                    CHECK(tensor_index(features.desc, 1, h, n) + (f - 16) == want);
                    CHECK(want * 4 < absolute.range);
                }
    }
}

TEST_CASE("SPIR-V: SignedZeroInfNanPreserve is added once, after the capabilities and entry point", "[unit][spirv]") {
    const auto original = vk::embedded_shader("flash_texel_o32");
    const auto patched = vk::patch_spirv(original, {.preserve_inf_nan_f32 = true});
    CHECK(patched.size() == original.size() + 2 + 4);
    std::size_t capabilities = 0, modes = 0;
    bool past_capabilities = false, capability_in_order = true;
    for (std::size_t at = 5; at < patched.size(); at += patched[at] >> 16) {
        const std::uint32_t opcode = patched[at] & 0xffff;
        if (opcode == 17) {
            capability_in_order = capability_in_order && !past_capabilities;
            capabilities += patched[at + 1] == 4466;
        } else {
            past_capabilities = true;
        }
        if (opcode == 16 && patched[at + 2] == 4461) modes += patched[at + 3] == 32;
    }
    CHECK(capability_in_order);
    CHECK(capabilities == 1);
    CHECK(modes == 1);
    const std::vector<std::uint32_t> junk{1, 2, 3};
    CHECK_THROWS_AS(vk::patch_spirv(junk, {.preserve_inf_nan_f32 = true}), Error);
}

TEST_CASE("SPIR-V: MaximallyReconvergesKHR comes with its extension, beside SignedZeroInfNanPreserve", "[unit][spirv]") {
    const auto original = vk::embedded_shader("flash_texel_o32");
    const auto patched = vk::patch_spirv(original, {.preserve_inf_nan_f32 = true, .maximal_reconvergence = true});
    // "SPV_KHR_maximal_reconvergence" is 29 bytes: 8 words with its NUL, 9 with the opcode.
    CHECK(patched.size() == original.size() + 2 + 9 + 4 + 3);
    std::size_t extensions = 0, reconvergence_modes = 0, float_modes = 0;
    bool past_preamble = false, extension_in_order = true;
    for (std::size_t at = 5; at < patched.size(); at += patched[at] >> 16) {
        const std::uint32_t opcode = patched[at] & 0xffff, words = patched[at] >> 16;
        if (opcode == 10) {
            const std::string name(reinterpret_cast<const char*>(&patched[at + 1]));
            extension_in_order = extension_in_order && !past_preamble;
            extensions += name == "SPV_KHR_maximal_reconvergence" && name.size() / 4 + 2 == words;
        } else if (opcode != 17) {
            past_preamble = true;
        }
        if (opcode == 16 && patched[at + 2] == 6023) reconvergence_modes += words == 3;
        if (opcode == 16 && patched[at + 2] == 4461) ++float_modes;
    }
    CHECK(extension_in_order);
    CHECK(extensions == 1);
    CHECK(reconvergence_modes == 1);
    CHECK(float_modes == 1);
    // The reconvergence mode alone leaves the float controls out.
    CHECK(vk::patch_spirv(original, {.maximal_reconvergence = true}).size() == original.size() + 9 + 3);
}

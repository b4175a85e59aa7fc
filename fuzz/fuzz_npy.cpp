// npy::parse on arbitrary bytes: it either returns an array whose data holds exactly its shape's
// bytes, or throws vkattn::InvalidArgument with a printable ASCII message. Any other exception, a
// crash, a sanitizer report or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>

#include "npy.hpp"
#include "vkattn/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const auto array = vkattn::npy::parse({reinterpret_cast<const std::byte*>(data), size}, "fuzz.npy");
        const auto expected = static_cast<std::size_t>(array.count()) * vkattn::npy::element_size(array.type);
        if (array.data.size() != expected) {
            std::fprintf(stderr, "npy::parse returned %zu data bytes for a shape of %zu bytes\n", array.data.size(),
                         expected);
            __builtin_trap();
        }
    } catch (const vkattn::InvalidArgument& e) {
        // A refused file: the expected outcome for almost every input. Its message quotes header
        // bytes escaped: a raw control or non-ASCII byte in it is a finding.
        for (const char* c = e.what(); *c; ++c) {
            const auto u = static_cast<unsigned char>(*c);
            if (u < 0x20 || u >= 0x7f) {
                std::fprintf(stderr, "npy::parse's message holds the raw byte 0x%02x: %s\n", u, e.what());
                __builtin_trap();
            }
        }
    }
    return 0;
}

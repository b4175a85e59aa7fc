// safetensors::parse on arbitrary bytes: it either returns tensors whose data each hold exactly
// their shape's bytes, or throws vkattn::InvalidArgument. Any other exception (a JSON library
// error escaping, std::bad_alloc from a size taken on trust), a crash, a sanitizer report or a hang
// is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>

#include "safetensors.hpp"
#include "vkattn/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const auto tensors =
            vkattn::safetensors::parse({reinterpret_cast<const std::byte*>(data), size}, "fuzz.safetensors");
        for (const auto& [name, array] : tensors) {
            const auto expected = static_cast<std::size_t>(array.count()) * vkattn::npy::element_size(array.type);
            if (array.data.size() != expected) {
                std::fprintf(stderr, "tensor '%s': %zu data bytes for a shape of %zu bytes\n", name.c_str(),
                             array.data.size(), expected);
                __builtin_trap();
            }
        }
    } catch (const vkattn::InvalidArgument&) {
        // A refused file: the expected outcome for almost every input.
    }
    return 0;
}

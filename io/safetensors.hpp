// .safetensors files (Hugging Face's format, also what PyTorch users export state dicts to):
//   8 bytes   N, the header's length, a little-endian unsigned 64-bit integer
//   N bytes   a JSON object: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                             "__metadata__": {"<key>": "<value>", ...}}   (metadata optional, ignored)
//   the rest  the data region; each tensor's bytes are [begin, end) of it, little-endian, C order.
//
// Reading checks every field against the file's real size before touching the data: the header
// length (at most 100 MB and inside the file), the JSON (an object, nested no deeper than the format
// needs, no name twice), each entry's dtype, shape (non-negative, element count within 64 bits) and
// offsets (inside the data region, begin <= end, exactly shape·element-size bytes, no two tensors
// overlapping). Fields other than dtype/shape/data_offsets in an entry are ignored, as the reference
// implementation does; so are gaps between tensors.
//
// Tensors come back as npy::Array, so a caller handles one array type whatever the file format.
// Supported dtypes: F32, F16, BOOL, I32, I64, and BF16, which is CONVERTED TO F32 on load (exact:
// a bfloat16 is the top half of a float32), because npy::Array has no bfloat16 type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "npy.hpp"

namespace vkattn::safetensors {

using Tensors = std::map<std::string, npy::Array>;

// The largest header accepted, as in the reference implementation: a bound on what a hostile file
// can make us allocate before any check has run.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

// Parses a whole file's bytes; `name` (the path or flag) starts every error message.
// Throws vkattn::InvalidArgument(name, ...).
Tensors parse(std::span<const std::byte> bytes, const std::string& name);
Tensors read(const std::filesystem::path& path);

// Writes every tensor (F32, F16, BOOL, I32 or I64, from its npy type), names in sorted order and
// data packed in that order, atomically (a temporary file renamed into place).
// Throws vkattn::InvalidArgument(path, ...) if a tensor's data does not match its shape.
void write(const std::filesystem::path& path, const Tensors& tensors);

}  // namespace vkattn::safetensors

// Whole-file reads and atomic writes, shared by the .npy and .safetensors formats.
// A write goes to `<path>.partial` and is renamed into place only once every byte is out, so a
// failure (a full disk, a bad tensor) never leaves a half-written file under the real name.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <vector>

namespace vkattn::io {

// Throws vkattn::InvalidArgument(path, ...) when the file cannot be opened or read.
std::vector<std::byte> read_whole_file(const std::filesystem::path& path);

// Calls `fill` with a stream onto the temporary file, then renames it to `path`.
// Throws vkattn::InvalidArgument(path, ...) on any failure, including one thrown by `fill`
// (the temporary file is removed first).
void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& fill);

}  // namespace vkattn::io

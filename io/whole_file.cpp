#include "whole_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "vkattn/errors.hpp"

namespace vkattn::io {

std::vector<std::byte> read_whole_file(const std::filesystem::path& path) {
    const std::string name = path.string();
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw InvalidArgument(name, "is a directory, not a file.");
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw InvalidArgument(name, "cannot open the file (" + std::string(std::strerror(errno)) + ").");
    std::vector<std::byte> bytes;
    if (const std::streamoff size = in.tellg(); size >= 0) {
        bytes.resize(static_cast<std::size_t>(size));
        in.seekg(0);
        in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
    } else {
        // A pipe (process substitution, /dev/stdin) has no size: read it to its end in chunks.
        in.clear();
        char chunk[65536];
        while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
            const auto* first = reinterpret_cast<const std::byte*>(chunk);
            bytes.insert(bytes.end(), first, first + in.gcount());
        }
        if (!in.bad()) in.clear();
    }
    if (!in) throw InvalidArgument(name, "reading the file failed.");
    return bytes;
}

void write_file_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& fill) {
    const std::string name = path.string();
    const std::filesystem::path tmp = name + ".partial";
    std::error_code ec;
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw InvalidArgument(name, "cannot create the file (" + std::string(std::strerror(errno)) + ").");
        try {
            fill(out);
        } catch (...) {
            out.close();
            std::filesystem::remove(tmp, ec);
            throw;
        }
        out.flush();
        if (!out) {
            out.close();
            std::filesystem::remove(tmp, ec);
            throw InvalidArgument(name, "writing the file failed.");
        }
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        throw InvalidArgument(name, "cannot move the finished file into place.");
    }
}

}  // namespace vkattn::io

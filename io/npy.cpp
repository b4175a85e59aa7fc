#include "npy.hpp"

#include <cstring>
#include <ostream>

#include "vkattn/errors.hpp"
#include "whole_file.hpp"

namespace vkattn::npy {
namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) { throw InvalidArgument(name, what); }

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
std::string value_after(const std::string& header, const std::string& key, const std::string& name) {
    const auto at = header.find("'" + key + "'");
    if (at == std::string::npos) fail(name, "the .npy header has no '" + key + "' field.");
    const auto colon = header.find(':', at);
    if (colon == std::string::npos) fail(name, "the .npy header is malformed near '" + key + "'.");
    return header.substr(colon + 1);
}

ElementType parse_descr(const std::string& header, const std::string& name) {
    std::string rest = value_after(header, "descr", name);
    const auto open = rest.find_first_of("'\"");
    if (open == std::string::npos) fail(name, "the .npy header's descr is not a string.");
    const auto close = rest.find(rest[open], open + 1);
    if (close == std::string::npos) fail(name, "the .npy header's descr is not terminated.");
    const std::string descr = rest.substr(open + 1, close - open - 1);
    if (descr == "<f4") return ElementType::f32;
    if (descr == "<f2") return ElementType::f16;
    if (descr == "|b1") return ElementType::boolean;
    if (descr == "<i4") return ElementType::i32;
    if (descr == "<i8") return ElementType::i64;
    if (!descr.empty() && descr[0] == '>')
        fail(name, "the array is big-endian (" + descr + "); only little-endian arrays are supported.");
    fail(name, "the dtype " + descr + " is not supported (float32 <f4, float16 <f2, bool |b1, int32 <i4, int64 <i8).");
}

std::vector<std::int64_t> parse_shape(const std::string& header, const std::string& name) {
    const std::string rest = value_after(header, "shape", name);
    const auto open = rest.find('(');
    const auto close = rest.find(')');
    if (open == std::string::npos || close == std::string::npos || close < open)
        fail(name, "the .npy header's shape is not a tuple.");
    std::vector<std::int64_t> shape;
    std::string number;
    auto flush = [&] {
        if (number.empty()) return;
        if (number.size() > 18) fail(name, "a dimension of the .npy shape is too large.");
        shape.push_back(std::stoll(number));
        number.clear();
    };
    for (std::size_t i = open + 1; i < close; ++i) {
        const char c = rest[i];
        if (c >= '0' && c <= '9') number += c;
        else if (c == ',' || c == ' ' || c == 'L') flush();
        else fail(name, "the .npy header's shape contains '" + std::string(1, c) + "'.");
    }
    flush();
    if (shape.size() > 8) fail(name, "the array has " + std::to_string(shape.size()) + " dimensions; at most 8 are supported.");
    return shape;
}

}  // namespace

std::size_t element_size(ElementType type) {
    switch (type) {
        case ElementType::f32: return 4;
        case ElementType::f16: return 2;
        case ElementType::boolean: return 1;
        case ElementType::i32: return 4;
        case ElementType::i64: return 8;
    }
    return 1;
}

std::string descr_of(ElementType type) {
    switch (type) {
        case ElementType::f32: return "<f4";
        case ElementType::f16: return "<f2";
        case ElementType::boolean: return "|b1";
        case ElementType::i32: return "<i4";
        case ElementType::i64: return "<i8";
    }
    return "?";
}

std::string type_name(ElementType type) {
    switch (type) {
        case ElementType::f32: return "float32";
        case ElementType::f16: return "float16";
        case ElementType::boolean: return "bool";
        case ElementType::i32: return "int32";
        case ElementType::i64: return "int64";
    }
    return "?";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::int64_t Array::count() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

Array parse(std::span<const std::byte> bytes, const std::string& name) {
    static const unsigned char magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0)
        fail(name, "not a NumPy .npy file (the magic string \\x93NUMPY is missing).");
    const auto major = static_cast<unsigned>(bytes[6]);
    std::size_t header_len = 0, header_start = 0;
    if (major == 1) {
        header_len = static_cast<std::size_t>(bytes[8]) | static_cast<std::size_t>(bytes[9]) << 8;
        header_start = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) fail(name, "the .npy file is truncated inside its header.");
        header_len = 0;
        for (int i = 0; i < 4; ++i) header_len |= static_cast<std::size_t>(bytes[8 + i]) << (8 * i);
        header_start = 12;
    } else {
        fail(name, "the .npy format version " + std::to_string(major) + " is not supported (1, 2 or 3).");
    }
    if (header_len > bytes.size() - header_start) fail(name, "the .npy file is truncated inside its header.");
    const std::string header(reinterpret_cast<const char*>(bytes.data() + header_start), header_len);

    Array a;
    a.type = parse_descr(header, name);
    const std::string fortran = value_after(header, "fortran_order", name);
    if (fortran.find("True") < fortran.find("False"))
        fail(name, "the array is in Fortran order; save it C-contiguous (numpy.ascontiguousarray).");
    a.shape = parse_shape(header, name);

    std::int64_t count = 1;
    for (auto d : a.shape)
        if (__builtin_mul_overflow(count, d, &count)) fail(name, "the .npy shape's element count overflows.");
    std::int64_t data_bytes = 0;
    if (__builtin_mul_overflow(count, static_cast<std::int64_t>(element_size(a.type)), &data_bytes))
        fail(name, "the .npy data size overflows.");
    const std::size_t available = bytes.size() - header_start - header_len;
    if (static_cast<std::uint64_t>(data_bytes) > available)
        fail(name, "the file is truncated: the shape needs " + std::to_string(data_bytes) + " bytes of data, the file holds " +
                       std::to_string(available) + ".");
    const auto* begin = bytes.data() + header_start + header_len;
    a.data.assign(begin, begin + data_bytes);
    return a;
}

Array read(const std::filesystem::path& path) {
    const std::vector<std::byte> bytes = io::read_whole_file(path);
    return parse(bytes, path.string());
}

void write(const std::filesystem::path& path, ElementType type, const std::vector<std::int64_t>& shape, const void* data) {
    std::string header = "{'descr': '" + descr_of(type) + "', 'fortran_order': False, 'shape': (";
    std::int64_t count = 1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        header += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
        if (i + 1 < shape.size()) header += ' ';
        count *= shape[i];
    }
    header += "), }";
    // Pad with spaces so that magic + version + length + header + '\n' is a multiple of 64.
    const std::size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    io::write_file_atomically(path, [&](std::ostream& out) {
        const unsigned char preamble[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                          static_cast<unsigned char>(header.size() & 0xff),
                                          static_cast<unsigned char>(header.size() >> 8)};
        out.write(reinterpret_cast<const char*>(preamble), sizeof(preamble));
        out.write(header.data(), static_cast<std::streamsize>(header.size()));
        out.write(static_cast<const char*>(data), static_cast<std::streamsize>(count * static_cast<std::int64_t>(element_size(type))));
    });
}

}  // namespace vkattn::npy

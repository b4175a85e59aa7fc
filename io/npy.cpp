#include "npy.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <optional>
#include <ostream>
#include <string_view>

#include "npy_header.hpp"
#include "vkattn/errors.hpp"
#include "whole_file.hpp"

namespace vkattn::npy {

using detail::fail;
using detail::Header;

namespace {

// Copies `src`, the elements of `shape` in Fortran order (axis 0 fastest), to `dst` in C order (the
// last axis fastest). Axis 0 is contiguous in the source and the last axis in the output, so every
// plane of those two axes (one per index of the axes between them) is a strided 2-D transpose, done
// in square tiles so that both sides stay within a few cache lines. Rank >= 2, no zero dimension.
template <std::size_t S>
void fortran_to_c(const std::byte* src, std::byte* dst, const std::vector<std::int64_t>& shape) {
    const std::size_t rank = shape.size();
    std::vector<std::size_t> extent(rank), src_stride(rank), dst_stride(rank);  // strides in elements
    for (std::size_t k = 0; k < rank; ++k) extent[k] = static_cast<std::size_t>(shape[k]);
    src_stride[0] = 1;
    for (std::size_t k = 1; k < rank; ++k) src_stride[k] = src_stride[k - 1] * extent[k - 1];
    dst_stride[rank - 1] = 1;
    for (std::size_t k = rank - 1; k-- > 0;) dst_stride[k] = dst_stride[k + 1] * extent[k + 1];

    const std::size_t rows = extent[0], cols = extent[rank - 1];
    const std::size_t src_col = src_stride[rank - 1], dst_row = dst_stride[0];
    constexpr std::size_t tile = 32;
    std::vector<std::size_t> index(rank, 0);  // of the middle axes 1 .. rank-2
    std::size_t src_base = 0, dst_base = 0;
    for (;;) {
        for (std::size_t i0 = 0; i0 < rows; i0 += tile) {
            const std::size_t i1 = std::min(rows, i0 + tile);
            for (std::size_t j0 = 0; j0 < cols; j0 += tile) {
                const std::size_t j1 = std::min(cols, j0 + tile);
                for (std::size_t i = i0; i < i1; ++i) {
                    std::byte* out = dst + (dst_base + i * dst_row) * S;
                    const std::byte* in = src + (src_base + i) * S;
                    for (std::size_t j = j0; j < j1; ++j) std::memcpy(out + j * S, in + j * src_col * S, S);
                }
            }
        }
        // The next index of the middle axes, axis 1 fastest; done when it wraps around.
        std::size_t k = 1;
        for (; k + 1 < rank; ++k) {
            src_base += src_stride[k];
            dst_base += dst_stride[k];
            if (++index[k] < extent[k]) break;
            src_base -= src_stride[k] * extent[k];
            dst_base -= dst_stride[k] * extent[k];
            index[k] = 0;
        }
        if (k + 1 >= rank) return;
    }
}

template <class U>
void swap_each(std::vector<std::byte>& data) {
    for (std::size_t at = 0; at + sizeof(U) <= data.size(); at += sizeof(U)) {
        U v;
        std::memcpy(&v, data.data() + at, sizeof(U));
        if constexpr (sizeof(U) == 2) v = __builtin_bswap16(v);
        else if constexpr (sizeof(U) == 4) v = __builtin_bswap32(v);
        else v = __builtin_bswap64(v);
        std::memcpy(data.data() + at, &v, sizeof(U));
    }
}

void swap_bytes(std::vector<std::byte>& data, std::size_t size) {
    if (size == 2) swap_each<std::uint16_t>(data);
    else if (size == 4) swap_each<std::uint32_t>(data);
    else if (size == 8) swap_each<std::uint64_t>(data);
}

}  // namespace

std::size_t element_size(ElementType type) {
    switch (type) {
        case ElementType::f32: return 4;
        case ElementType::f16: return 2;
        case ElementType::boolean: return 1;
        case ElementType::i32: return 4;
        case ElementType::i64: return 8;
        case ElementType::u8: return 1;
        case ElementType::u16: return 2;
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
        case ElementType::u8: return "|u1";
        case ElementType::u16: return "<u2";
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
        case ElementType::u8: return "uint8";
        case ElementType::u16: return "uint16";
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

namespace {

// A file's header and where its data starts; the data's size checked against `file_size`.
struct Framing {
    Header header;
    std::size_t data_offset = 0;
    std::int64_t count = 0, data_bytes = 0;
};

// `bytes` holds at least the whole header (the file's first bytes); `file_size` is the whole file's.
Framing frame(std::span<const std::byte> bytes, std::uint64_t file_size, const std::string& name) {
    static const unsigned char magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0)
        fail(name, "not a NumPy .npy file (the magic string \\x93NUMPY is missing).");
    const auto major = static_cast<unsigned>(bytes[6]), minor = static_cast<unsigned>(bytes[7]);
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        fail(name, "the .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                       " is not supported (1.0, 2.0 or 3.0).");
    // 1.0: a 2-byte header length; 2.0 and 3.0 (3.0: a UTF-8 header): 4 bytes. Both little-endian.
    const std::size_t length_bytes = major == 1 ? 2 : 4, header_start = 8 + length_bytes;
    if (bytes.size() < header_start) fail(name, "the .npy file is truncated inside its header.");
    std::size_t header_len = 0;
    for (std::size_t i = 0; i < length_bytes; ++i) header_len |= static_cast<std::size_t>(bytes[8 + i]) << (8 * i);
    if (header_len > bytes.size() - header_start) fail(name, "the .npy file is truncated inside its header.");
    Framing f;
    f.header = detail::parse_header({reinterpret_cast<const char*>(bytes.data() + header_start), header_len}, name);
    f.count = 1;
    for (auto d : f.header.shape)
        if (__builtin_mul_overflow(f.count, d, &f.count)) fail(name, "the .npy shape's element count overflows.");
    if (__builtin_mul_overflow(f.count, static_cast<std::int64_t>(element_size(f.header.type)), &f.data_bytes))
        fail(name, "the .npy data size overflows.");
    f.data_offset = header_start + header_len;
    const std::uint64_t available = file_size - f.data_offset;
    if (static_cast<std::uint64_t>(f.data_bytes) > available)
        fail(name, "the file is truncated: the shape needs " + std::to_string(f.data_bytes) + " bytes of data, the file holds " +
                       std::to_string(available) + ".");
    return f;
}

}  // namespace

Array parse(std::span<const std::byte> bytes, const std::string& name) {
    const Framing f = frame(bytes, bytes.size(), name);
    Array a;
    a.type = f.header.type;
    a.shape = f.header.shape;
    const std::size_t size = element_size(a.type);
    const auto* begin = bytes.data() + f.data_offset;
    if (!f.header.fortran_order || a.shape.size() < 2 || f.count == 0) {
        a.data.assign(begin, begin + f.data_bytes);  // C order; or rank 0 or 1 or empty, where both orders agree
    } else {
        a.data.resize(static_cast<std::size_t>(f.data_bytes));
        switch (size) {
            case 1: fortran_to_c<1>(begin, a.data.data(), a.shape); break;
            case 2: fortran_to_c<2>(begin, a.data.data(), a.shape); break;
            case 4: fortran_to_c<4>(begin, a.data.data(), a.shape); break;
            default: fortran_to_c<8>(begin, a.data.data(), a.shape); break;
        }
    }
    if (f.header.big_endian != (std::endian::native == std::endian::big)) swap_bytes(a.data, size);
    return a;
}

Array read_rows(const std::filesystem::path& path, const RowSelector& select) {
    const std::string name = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(name, "cannot be opened for reading.");
    in.seekg(0, std::ios::end);
    const auto file_size = static_cast<std::uint64_t>(in.tellg());
    // The header: its length is in the first 12 bytes; read that much and then the whole header.
    std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, 12)));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
    std::size_t header_end = head.size();
    if (head.size() >= 10) {
        const bool long_length = static_cast<unsigned>(head[6]) != 1;
        std::size_t length = static_cast<std::size_t>(head[8]) | static_cast<std::size_t>(head[9]) << 8;
        if (long_length && head.size() >= 12)
            length |= static_cast<std::size_t>(head[10]) << 16 | static_cast<std::size_t>(head[11]) << 24;
        header_end = std::min<std::uint64_t>(file_size, (long_length ? 12 : 10) + static_cast<std::uint64_t>(length));
    }
    head.resize(header_end);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
    const Framing f = frame(head, file_size, name);
    const std::vector<std::int64_t>& shape = f.header.shape;
    if (shape.size() < 2) return read(path);  // no row axis: the whole array, `select` not asked
    const std::int64_t rows = shape[shape.size() - 2];
    const std::vector<RowRange> ranges = select(rows);
    std::int64_t kept = 0;
    for (const RowRange& r : ranges) {
        if (r.first < 0 || r.length < 0 || r.first + r.length > rows)
            fail(name, "rows [" + std::to_string(r.first) + ", " + std::to_string(r.first + r.length) +
                           ") are outside the file's " + std::to_string(rows) + ".");
        kept += r.length;
    }
    const std::size_t size = element_size(f.header.type);
    const std::int64_t row_bytes = shape.back() * static_cast<std::int64_t>(size);
    std::int64_t outer = 1;
    for (std::size_t d = 0; d + 2 < shape.size(); ++d) outer *= shape[d];
    Array a;
    a.type = f.header.type;
    a.shape = shape;
    a.shape[shape.size() - 2] = kept;
    a.data.resize(static_cast<std::size_t>(outer * kept * row_bytes));
    if (f.header.fortran_order && f.count > 0) {  // rows are not contiguous on disk: read it all, then cut
        const Array whole = read(path);
        std::byte* to = a.data.data();
        for (std::int64_t o = 0; o < outer; ++o)
            for (const RowRange& r : ranges) {
                const auto* from = whole.data.data() + (o * rows + r.first) * row_bytes;
                to = std::copy(from, from + r.length * row_bytes, to);
            }
        return a;
    }
    std::byte* to = a.data.data();
    for (std::int64_t o = 0; o < outer; ++o)
        for (const RowRange& r : ranges) {
            in.seekg(static_cast<std::streamoff>(f.data_offset + static_cast<std::uint64_t>((o * rows + r.first) * row_bytes)));
            in.read(reinterpret_cast<char*>(to), static_cast<std::streamsize>(r.length * row_bytes));
            if (!in) fail(name, "could not be read.");
            to += r.length * row_bytes;
        }
    if (f.header.big_endian != (std::endian::native == std::endian::big)) swap_bytes(a.data, size);
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

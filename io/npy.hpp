// NumPy .npy files. Reading: format 1.0, 2.0 (4-byte header length) and 3.0 (UTF-8 header); the
// dtypes float32, float16, bool, int32, int64, uint8 and uint16 (bf16 bit patterns, quantized
// rows' bytes) in either byte order ('<', '>', '=' or none; '|' for the one-byte types), big-endian data swapped to native while loading; rank 0 to 8, C order or Fortran order
// (`fortran_order: True`, what np.save writes for a transposed array), Fortran order transposed
// while loading, so an Array is always C order in native byte order. Every field is checked against the
// file's real size; an error message quotes header bytes escaped (\x07, \xc3), never raw.
// Writing: format 1.0, little-endian, C order, atomically (a temporary file renamed into place, so a
// failure never leaves a half-written output behind).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace vkattn::npy {

enum class ElementType : std::uint8_t { f32, f16, boolean, i32, i64, u8, u16 };

std::size_t element_size(ElementType type);
std::string descr_of(ElementType type);  // "<f4", "<f2", "|b1", "<i4", "<i8", "|u1", "<u2"
std::string type_name(ElementType type);  // "float32", "float16", "bool", "int32", ..., "uint16", for messages
std::string shape_text(const std::vector<std::int64_t>& shape);  // "[2, 3]", for messages

struct Array {
    ElementType type = ElementType::f32;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> data;  // count() · element_size(type) bytes, C order

    std::int64_t count() const;
    template <class T>
    const T* as() const { return reinterpret_cast<const T*>(data.data()); }
};

// Parses a whole file's bytes; `name` (the path or flag) starts every error message.
// Throws vkattn::InvalidArgument(name, ...).
Array parse(std::span<const std::byte> bytes, const std::string& name);
Array read(const std::filesystem::path& path);

// Only some rows of a file, along its second-to-last axis (the sequence of a [.., N, D] tensor):
// `select` is handed that axis's length and returns the ranges to keep, in the order they are wanted;
// the Array holds them one after the other (that axis shrunk to their total). A C-order file is read
// range by range (the rest never enters memory); a Fortran-order one is read whole, then cut. An
// array of rank 0 or 1 has no such axis: it is read whole, `select` not asked.
struct RowRange {
    std::int64_t first = 0, length = 0;
};
using RowSelector = std::function<std::vector<RowRange>(std::int64_t rows)>;
Array read_rows(const std::filesystem::path& path, const RowSelector& select);

// Writes `count(shape)` elements from `data`, as format 1.0.
void write(const std::filesystem::path& path, ElementType type, const std::vector<std::int64_t>& shape,
           const void* data);

}  // namespace vkattn::npy

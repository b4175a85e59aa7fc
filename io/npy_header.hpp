// The .npy header's dict, parsed (io/npy.cpp's reader; internal to vkattn_io): the element type and
// byte order, the memory order and the shape, each checked, every refusal an InvalidArgument naming
// the file in a sentence that quotes the header's bytes escaped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "npy.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::npy::detail {

[[noreturn]] inline void fail(const std::string& name, const std::string& what) { throw InvalidArgument(name, what); }

// What the header says: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct Header {
    ElementType type = ElementType::f32;
    bool big_endian = false;
    bool fortran_order = false;
    std::vector<std::int64_t> shape;
};

// Parses the header's text (the bytes between the length and the data), `name` the file's.
Header parse_header(std::string_view text, const std::string& name);

}  // namespace vkattn::npy::detail

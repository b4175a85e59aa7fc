// The .npy format (io/npy.cpp, io/npy_header.cpp): round trips for every dtype, files that NumPy itself wrote
// (tests/fixtures/npy: Fortran order, format 2.0 and 3.0, big-endian), row selections, and every
// corruption a reader must refuse, each with the words that tell a user what is wrong, header bytes
// quoted escaped.
#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "npy.hpp"
#include "safetensors.hpp"
#include "state_dict.hpp"
#include "support/io_files.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::test;
using Catch::Contains;

namespace {

// A .npy file from its parts: format `major`.`minor`, the header dict (padded with spaces and a newline
// as NumPy does), then `data`.
std::vector<std::byte> npy_file(const std::string& dict, const std::vector<std::byte>& data, int major = 1, int minor = 0) {
    const std::size_t length_bytes = major == 1 ? 2 : 4;
    std::string header = dict;
    header.append((64 - (8 + length_bytes + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    std::vector<std::byte> file;
    for (const unsigned char c : {0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59}) file.push_back(std::byte{c});  // \x93NUMPY
    file.push_back(static_cast<std::byte>(major));
    file.push_back(static_cast<std::byte>(minor));
    for (std::size_t i = 0; i < length_bytes; ++i) file.push_back(static_cast<std::byte>(header.size() >> (8 * i) & 0xff));
    for (const char c : header) file.push_back(static_cast<std::byte>(c));
    file.insert(file.end(), data.begin(), data.end());
    return file;
}

std::string npy_dict(const std::string& descr, bool fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape + ", }";
}

// The message of the InvalidArgument that npy::parse throws for `file`; fails the test if it parses.
std::string npy_rejection(const std::vector<std::byte>& file) {
    try {
        npy::parse(file, "bad.npy");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "bad.npy");
        return e.what();
    }
    FAIL("the file was accepted");
    return {};
}


float half_to_float_bits(std::uint16_t h) {
    const int exponent = h >> 10 & 31, mantissa = h & 1023;
    const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                                          : std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
    return h >> 15 ? -magnitude : magnitude;
}

// The value tests/fixtures/npy/generate.py puts at C-order index i, for `a`'s type, as a double.
double fixture_value(npy::ElementType type, std::int64_t i) {
    switch (type) {
        case npy::ElementType::f32:
        case npy::ElementType::f16: return static_cast<double>(i - 5) * 0.5;
        case npy::ElementType::i32: return static_cast<double>((i - 5) * 65537);
        case npy::ElementType::i64: return static_cast<double>((i - 5) * ((std::int64_t{1} << 40) + 3));
        case npy::ElementType::boolean: return i % 3 == 1 ? 1 : 0;
        case npy::ElementType::u8:
        case npy::ElementType::u16: break;  // generate.py writes none (the ggml fixtures read them)
    }
    return 0;
}

double element(const npy::Array& a, std::int64_t i) {
    const auto n = static_cast<std::size_t>(i);
    switch (a.type) {
        case npy::ElementType::f32: return a.as<float>()[n];
        case npy::ElementType::f16: return half_to_float_bits(a.as<std::uint16_t>()[n]);
        case npy::ElementType::i32: return a.as<std::int32_t>()[n];
        case npy::ElementType::i64: return static_cast<double>(a.as<std::int64_t>()[n]);
        case npy::ElementType::boolean:
        case npy::ElementType::u8: return static_cast<double>(a.as<std::uint8_t>()[n]);
        case npy::ElementType::u16: return static_cast<double>(a.as<std::uint16_t>()[n]);
    }
    return 0;
}

}  // namespace

TEST_CASE("npy files round-trip every dtype and shape", "[io][npy]") {
    const fs::path dir = scratch_dir("npy");
    const auto type = GENERATE(from_range(all_types));
    const auto shape = GENERATE(std::vector<std::int64_t>{}, std::vector<std::int64_t>{0},
                                std::vector<std::int64_t>{7}, std::vector<std::int64_t>{2, 3, 5});
    const npy::Array a = random_array(type, shape, 1);
    npy::write(dir / "a.npy", a.type, a.shape, a.data.data());
    check_same(npy::read(dir / "a.npy"), a);
    CHECK_FALSE(fs::exists(dir / "a.npy.partial"));
}

// Files NumPy wrote (tests/fixtures/npy/generate.py): Fortran order of rank 0 to 5, format 2.0 and 3.0,
// big-endian; each holds generate.py's value for its C-order index, whatever order the file stores.
TEST_CASE("npy files written by NumPy load in C order with NumPy's values", "[io][npy][numpy]") {
    using T = npy::ElementType;
    struct Fixture {
        const char* file;
        T type;
        std::vector<std::int64_t> shape;
    };
    const std::vector<Fixture> fixtures{
        {"fortran_r2_f32.npy", T::f32, {3, 4}},
        {"fortran_r2_bool.npy", T::boolean, {3, 5}},
        {"fortran_r3_f16.npy", T::f16, {2, 3, 4}},
        {"fortran_r3_i64.npy", T::i64, {3, 2, 4}},
        {"fortran_r4_i32.npy", T::i32, {2, 3, 2, 3}},
        {"fortran_r4_f32_unit_dim.npy", T::f32, {2, 1, 3, 4}},
        {"fortran_r5_f32.npy", T::f32, {2, 2, 1, 2, 3}},
        {"fortran_r1_f32.npy", T::f32, {5}},
        {"fortran_r0_i64.npy", T::i64, {}},
        {"fortran_empty_f32.npy", T::f32, {2, 0, 3}},
        {"v2_f32.npy", T::f32, {2, 3}},
        {"v2_fortran_i64.npy", T::i64, {3, 4}},
        {"v3_f16.npy", T::f16, {2, 3}},
        {"v3_fortran_bool.npy", T::boolean, {4, 3}},
        {"big_f32.npy", T::f32, {2, 3}},
        {"big_f16.npy", T::f16, {5}},
        {"big_i32.npy", T::i32, {2, 2}},
        {"big_i64.npy", T::i64, {3}},
        {"big_fortran_f32.npy", T::f32, {2, 3, 4}},
        {"big_fortran_i64.npy", T::i64, {3, 2}},
    };
    const fs::path dir = VKATTN_NPY_FIXTURES;
    std::size_t checked = 0;
    for (const Fixture& f : fixtures) {
        INFO(f.file);
        const npy::Array a = npy::read(dir / f.file);
        CHECK(a.type == f.type);
        REQUIRE(a.shape == f.shape);
        REQUIRE(a.data.size() == static_cast<std::size_t>(a.count()) * npy::element_size(f.type));
        for (std::int64_t i = 0; i < a.count(); ++i) {
            INFO("C-order index " << i);
            CHECK(element(a, i) == fixture_value(f.type, i));
        }
        ++checked;
    }
    // Every file generate.py writes is in the table above (or refused below).
    std::size_t files = 0;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.path().extension() == ".npy" && entry.path().filename().string().rfind("refused_", 0) != 0) ++files;
    CHECK(files == checked);

    // A structured dtype with a non-ASCII (UTF-8) field name, which NumPy stores as format 3.0: refused,
    // its name quoted escaped.
    const std::string message = message_of([&] { npy::read(dir / "refused_v3_structured_utf8.npy"); });
    CHECK_THAT(message, Contains("structured") && Contains("\\xce\\xb1\\xc3\\xa9") && Contains("float32 <f4"));
    CHECK(printable_ascii(message));
}

// Fortran order against a per-element index computation: every rank the reader takes, dimensions
// past the 32-element tiles of the transposition, every element size.
TEST_CASE("npy Fortran-order arrays of rank 0 to 8 load as their C-order transposition", "[io][npy]") {
    const std::vector<std::vector<std::int64_t>> shapes{
        {}, {7}, {70, 45}, {1, 33}, {33, 1}, {3, 40, 5}, {2, 3, 4, 5}, {65, 2, 1, 3, 34}, {2, 1, 3, 2, 1, 2, 3, 2},
        {2, 2, 2, 2, 2, 2, 2, 2}, {3, 0, 4}};
    std::mt19937 rng(5);
    for (const auto& shape : shapes) {
        for (const auto type : all_types) {
            INFO(npy::shape_text(shape) << " " << npy::type_name(type));
            const npy::Array fortran = random_array(type, shape, rng());  // its bytes, in Fortran order
            const std::size_t size = npy::element_size(type), rank = shape.size();
            std::vector<std::byte> expected(fortran.data.size());
            std::vector<std::int64_t> index(rank, 0);
            for (std::int64_t c = 0; c < fortran.count(); ++c) {
                // C-order index c -> multi-index -> Fortran offset (axis 0 fastest).
                std::int64_t rest = c, offset = 0, stride = 1;
                for (std::size_t k = rank; k-- > 0;) {
                    index[k] = rest % shape[k];
                    rest /= shape[k];
                }
                for (std::size_t k = 0; k < rank; ++k) {
                    offset += index[k] * stride;
                    stride *= shape[k];
                }
                std::memcpy(expected.data() + static_cast<std::size_t>(c) * size,
                            fortran.data.data() + static_cast<std::size_t>(offset) * size, size);
            }
            std::string shape_tuple = "(";
            for (auto d : shape) shape_tuple += std::to_string(d) + ",";
            const npy::Array a = npy::parse(npy_file(npy_dict(npy::descr_of(type), true, shape_tuple + ")"), fortran.data), "f.npy");
            CHECK(a.type == type);
            CHECK(a.shape == shape);
            CHECK(a.data == expected);
        }
    }
}

TEST_CASE("npy byte orders: big-endian is swapped, native spellings and one-byte types read as they are", "[io][npy]") {
    const std::vector<std::byte> le{std::byte{0x01}, std::byte{0x02}, std::byte{0x03}, std::byte{0x04},
                                    std::byte{0x05}, std::byte{0x06}, std::byte{0x07}, std::byte{0x08}};
    const std::vector<std::byte> be2{le[1], le[0], le[3], le[2], le[5], le[4], le[7], le[6]};
    const std::vector<std::byte> be4{le[3], le[2], le[1], le[0], le[7], le[6], le[5], le[4]};
    const std::vector<std::byte> be8{le[7], le[6], le[5], le[4], le[3], le[2], le[1], le[0]};
    struct Case {
        std::string descr, shape;
        npy::ElementType type;
        std::vector<std::byte> file_data;
    };
    const std::vector<Case> cases{
        {"<f4", "(2,)", npy::ElementType::f32, le},   {">f4", "(2,)", npy::ElementType::f32, be4},
        {"=f4", "(2,)", npy::ElementType::f32, le},   {"f4", "(2,)", npy::ElementType::f32, le},
        {">f2", "(4,)", npy::ElementType::f16, be2},  {"f2", "(4,)", npy::ElementType::f16, le},
        {">i4", "(2,)", npy::ElementType::i32, be4},  {"=i4", "(2,)", npy::ElementType::i32, le},
        {">i8", "(1,)", npy::ElementType::i64, be8},  {"i8", "(1,)", npy::ElementType::i64, le},
    };
    for (const Case& c : cases) {
        INFO(c.descr);
        const npy::Array a = npy::parse(npy_file(npy_dict(c.descr, false, c.shape), c.file_data), "b.npy");
        CHECK(a.type == c.type);
        CHECK(a.data == le);
    }
    const std::vector<std::byte> bools{std::byte{1}, std::byte{0}, std::byte{1}};
    for (const char* descr : {"|b1", "<b1", ">b1", "=b1", "b1"}) {
        INFO(descr);
        const npy::Array a = npy::parse(npy_file(npy_dict(descr, false, "(3,)"), bools), "b.npy");
        CHECK(a.type == npy::ElementType::boolean);
        CHECK(a.data == bools);
    }
    // '|' (no byte order) only for one-byte types; other types stay unsupported, naming the supported set.
    for (const char* descr : {"|f4", "<f8", ">u4", "|u2", "<c8", "O"}) {
        INFO(descr);
        const std::string message = npy_rejection(npy_file(npy_dict(descr, false, "(1,)"), le));
        CHECK_THAT(message, Contains(std::string("dtype '") + descr + "' is not supported") &&
                                Contains("float32 <f4, float16 <f2, bool |b1, int32 <i4, int64 <i8"));
    }
}

TEST_CASE("npy format versions 1.0, 2.0 and 3.0 are read, others refused", "[io][npy]") {
    const npy::Array a = random_array(npy::ElementType::i32, {3, 2}, 4);
    for (const int major : {1, 2, 3}) {
        INFO("version " << major);
        const npy::Array b = npy::parse(npy_file(npy_dict("<i4", false, "(3, 2)"), a.data, major), "v.npy");
        check_same(b, a);
    }
    // Keys in any order, double quotes, no spaces, no trailing comma, Python 2's long dimensions,
    // an unknown key: all still the same dict.
    for (const std::string dict : {"{'shape': (3, 2), 'fortran_order': False, 'descr': '<i4'}",
                                   "{\"descr\":\"<i4\",\"fortran_order\":False,\"shape\":(3,2)}",
                                   "{'descr': '<i4', 'fortran_order': False, 'shape': (3L, 2L), }",
                                   "{'descr': '<i4', 'extra': [1, (2, '}')], 'fortran_order': False, 'shape': (3, 2)}"}) {
        INFO(dict);
        check_same(npy::parse(npy_file(dict, a.data, 2), "v.npy"), a);
    }
    CHECK_THAT(npy_rejection(npy_file(npy_dict("<i4", false, "(3, 2)"), a.data, 4)),
               Contains("format version 4.0 is not supported (1.0, 2.0 or 3.0)"));
    CHECK_THAT(npy_rejection(npy_file(npy_dict("<i4", false, "(3, 2)"), a.data, 1, 1)), Contains("format version 1.1"));
    std::vector<std::byte> v2 = npy_file(npy_dict("<i4", false, "(3, 2)"), a.data, 2);
    v2[11] = std::byte{0x10};  // a 4-byte header length of 268 MB
    CHECK_THAT(npy_rejection(v2), Contains("truncated inside its header"));
    v2.resize(11);
    CHECK_THAT(npy_rejection(v2), Contains("truncated inside its header"));
}

TEST_CASE("npy corruptions are refused with a sentence naming the problem", "[io][npy]") {
    const std::vector<std::byte> six(24, std::byte{0});
    struct Case {
        const char* what;
        std::vector<std::byte> file;
        std::vector<std::string> words;
    };
    const std::vector<Case> cases{
        {"not npy", std::vector<std::byte>(16, std::byte{'x'}), {"not a NumPy .npy file"}},
        {"no descr", npy_file("{'fortran_order': False, 'shape': (6,), }", six), {"no 'descr' field"}},
        {"no fortran_order", npy_file("{'descr': '<f4', 'shape': (6,), }", six), {"no 'fortran_order' field"}},
        {"no shape", npy_file("{'descr': '<f4', 'fortran_order': False, }", six), {"no 'shape' field"}},
        {"not a dict", npy_file("['descr', '<f4']", six), {"malformed at byte 0", "expected '{'", "found '['descr'"}},
        {"unterminated", npy_file("{'descr': '<f4', 'fortran_order': False", six), {"malformed", "ends where ',' or '}'"}},
        {"fortran_order not a bool", npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", six),
         {"True or False for 'fortran_order'", "found '0"}},
        {"shape a list", npy_file(npy_dict("<f4", false, "[6]"), six), {"expected '('", "found '[6]"}},
        {"negative dimension", npy_file(npy_dict("<f4", false, "(-6,)"), six), {"non-negative integer", "found '-6,)"}},
        {"dimension too large", npy_file(npy_dict("<f4", false, "(1234567890123456789,)"), six), {"too large"}},
        {"nine dimensions", npy_file(npy_dict("<f4", false, "(1,1,1,1,1,1,1,1,1)"), six), {"at most 8"}},
        {"count overflows", npy_file(npy_dict("<f4", false, "(999999999999,999999999999)"), six), {"overflows"}},
        {"truncated data", npy_file(npy_dict("<f4", false, "(7,)"), six), {"truncated", "needs 28 bytes", "holds 24"}},
        {"truncated Fortran data", npy_file(npy_dict("<f4", true, "(2, 4)"), six), {"truncated", "needs 32 bytes"}},
        {"structured", npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", six),
         {"dtype [('a', '<f4')] is a structured", "float32 <f4"}},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        const std::string message = npy_rejection(c.file);
        for (const std::string& w : c.words) CHECK_THAT(message, Contains(w));
        CHECK(printable_ascii(message));
    }
}

// Every place a message quotes the header escapes control bytes and bytes beyond ASCII (\x07, \xc3),
// and the backslash, so a file cannot write raw bytes to the user's terminal.
TEST_CASE("npy error messages quote header bytes escaped, never raw", "[io][npy]") {
    const std::vector<std::byte> data(8, std::byte{0});
    struct Case {
        const char* what;
        std::string dict;
        std::string quoted;
    };
    const std::vector<Case> cases{
        {"descr", npy_dict("<f\x07\\\\\xc3\xa9", false, "(2,)"), "'<f\\x07\\\\\\xc3\\xa9' is not supported"},
        {"structured descr", "{'descr': [('\x1b[31m\xff', '<f4')], 'fortran_order': False, 'shape': (2,)}",
         "[('\\x1b[31m\\xff', '<f4')]"},
        {"fortran_order", "{'descr': '<f4', 'fortran_order': \x07\xc3\xa9, 'shape': (2,)}", "found '\\x07\\xc3\\xa9"},
        {"shape", npy_dict("<f4", false, "(2\x7f\x80,)"), "found '\\x7f\\x80,)"},
        {"key", "{\x01: 1}", "found '\\x01: 1}"},
        {"a long value", npy_dict(std::string(200, '\x90'), false, "(2,)"), "\\x90\\x90...' is not supported"},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        const std::string message = npy_rejection(npy_file(c.dict, data, 3));  // 3.0: a UTF-8 header
        CHECK_THAT(message, Contains(c.quoted));
        CHECK(printable_ascii(message));
        CHECK(message.size() < 400);  // a quote is cut short
    }
}


TEST_CASE("npy row selections read only the rows asked for, in any order, from either memory order", "[io][npy]") {
    const fs::path dir = scratch_dir("rows");
    const std::vector<std::int64_t> shape{2, 3, 10, 4};
    const npy::Array whole = random_array(npy::ElementType::f16, shape, 9);
    npy::write(dir / "c.npy", whole.type, whole.shape, whole.data.data());
    const std::vector<npy::RowRange> ranges{{7, 2}, {1, 3}, {9, 0}};
    auto expected = [&](const npy::Array& from) {
        std::vector<std::byte> out;
        const std::int64_t row = 4 * 2;  // D elements of 2 bytes
        for (std::int64_t o = 0; o < 6; ++o)
            for (const auto& r : ranges) {
                const auto* p = from.data.data() + (o * 10 + r.first) * row;
                out.insert(out.end(), p, p + r.length * row);
            }
        return out;
    };
    std::int64_t seen = -1;
    const npy::Array part = npy::read_rows(dir / "c.npy", [&](std::int64_t rows) {
        seen = rows;
        return ranges;
    });
    CHECK(seen == 10);
    CHECK(part.shape == std::vector<std::int64_t>{2, 3, 5, 4});
    CHECK(part.data == expected(whole));
    // A Fortran-order file (and its big-endian twin) gives the same rows of its C-order reading.
    for (const char* descr : {"<f2", ">f2"}) {
        const std::vector<std::byte> file = npy_file(npy_dict(descr, true, "(2,3,10,4,)"), whole.data);
        {
            std::ofstream out(dir / "f.npy", std::ios::binary);
            out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
        }
        const npy::Array c_order = npy::read(dir / "f.npy");
        const npy::Array rows = npy::read_rows(dir / "f.npy", [&](std::int64_t) { return ranges; });
        INFO(descr);
        CHECK(rows.data == expected(c_order));
    }
    CHECK_THROWS_WITH(npy::read_rows(dir / "c.npy", [](std::int64_t) { return std::vector<npy::RowRange>{{8, 3}}; }),
                      Catch::Contains("c.npy") && Catch::Contains("outside"));
    // Rank 1 has no row axis: read whole, the selector not asked.
    const std::vector<std::byte> line = npy_file(npy_dict("<f2", false, "(40,)"), {whole.data.begin(), whole.data.begin() + 80});
    {
        std::ofstream out(dir / "line.npy", std::ios::binary);
        out.write(reinterpret_cast<const char*>(line.data()), static_cast<std::streamsize>(line.size()));
    }
    bool asked = false;
    const npy::Array all = npy::read_rows(dir / "line.npy", [&](std::int64_t) {
        asked = true;
        return std::vector<npy::RowRange>{};
    });
    CHECK_FALSE(asked);
    CHECK(all.shape == std::vector<std::int64_t>{40});
    fs::remove_all(dir);
}

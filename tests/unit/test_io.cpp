// The tensor file formats (io/): .npy and .safetensors round trips for every dtype, .npy files that
// NumPy itself wrote (tests/fixtures/npy: Fortran order, format 2.0 and 3.0, big-endian), every
// corruption a reader must refuse (each with the words that tell a user what is wrong, header bytes
// quoted escaped), state dicts from both exports, and the PyTorch fixtures of tests/fixtures/mha
// loaded both ways.
#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "npy.hpp"
#include "safetensors.hpp"
#include "state_dict.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, so tests can run in parallel (ctest -j) without sharing files.
fs::path scratch_dir(const std::string& test) {
    const fs::path dir = fs::temp_directory_path() / ("vkattn-io-" + test + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

// Random but valid contents for `type` (bools are 0 or 1, as NumPy and safetensors require).
npy::Array random_array(npy::ElementType type, std::vector<std::int64_t> shape, unsigned seed) {
    npy::Array a{.type = type, .shape = std::move(shape), .data = {}};
    a.data.resize(static_cast<std::size_t>(a.count()) * npy::element_size(type));
    std::mt19937 rng(seed);
    for (auto& b : a.data) b = static_cast<std::byte>(type == npy::ElementType::boolean ? rng() % 2 : rng() % 256);
    return a;
}

void check_same(const npy::Array& a, const npy::Array& b) {
    CHECK(a.type == b.type);
    CHECK(a.shape == b.shape);
    CHECK(a.data == b.data);
}

// A .safetensors file: the 8-byte length (`claimed_length`, normally the header's), the header, then
// `data_bytes` bytes of data.
std::vector<std::byte> safetensors_file(const std::string& header, std::size_t data_bytes, std::uint64_t claimed_length) {
    std::vector<std::byte> file(8 + header.size() + data_bytes, std::byte{0});
    std::memcpy(file.data(), &claimed_length, 8);
    std::memcpy(file.data() + 8, header.data(), header.size());
    for (std::size_t i = 0; i < data_bytes; ++i) file[8 + header.size() + i] = static_cast<std::byte>(i);
    return file;
}
std::vector<std::byte> safetensors_file(const std::string& header, std::size_t data_bytes) {
    return safetensors_file(header, data_bytes, header.size());
}

// The message of the InvalidArgument that parsing `file` throws; fails the test if it parses.
std::string rejection(const std::vector<std::byte>& file) {
    try {
        safetensors::parse(file, "bad.safetensors");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "bad.safetensors");
        return e.what();
    }
    FAIL("the file was accepted");
    return {};
}

template <class F>
std::string message_of(F&& call) {
    try {
        call();
    } catch (const InvalidArgument& e) {
        return e.what();
    }
    FAIL("no InvalidArgument was thrown");
    return {};
}

const std::vector<npy::ElementType> all_types{npy::ElementType::f32, npy::ElementType::f16, npy::ElementType::boolean,
                                              npy::ElementType::i32, npy::ElementType::i64, npy::ElementType::u8,
                                              npy::ElementType::u16};

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

// A message holds printable ASCII only: no raw byte of a header reaches the user's terminal.
bool printable_ascii(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u >= 0x20 && u < 0x7f;
    });
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

TEST_CASE("safetensors files round-trip every dtype and shape", "[io][safetensors]") {
    const fs::path dir = scratch_dir("st");
    safetensors::Tensors tensors;
    unsigned seed = 0;
    for (const auto type : all_types) {
        const std::string t = npy::type_name(type);
        tensors.emplace(t + ".matrix", random_array(type, {3, 5}, ++seed));
        tensors.emplace(t + ".scalar", random_array(type, {}, ++seed));
        tensors.emplace(t + ".empty", random_array(type, {4, 0}, ++seed));
        tensors.emplace(t + ".odd", random_array(type, {1, 7, 3}, ++seed));
    }
    safetensors::write(dir / "all.safetensors", tensors);
    const auto back = safetensors::read(dir / "all.safetensors");
    REQUIRE(back.size() == tensors.size());
    for (const auto& [name, a] : tensors) {
        INFO(name);
        REQUIRE(back.count(name) == 1);
        check_same(back.at(name), a);
    }
    // Other readers expect the data region 8-byte aligned: the header length is a multiple of 8.
    std::ifstream in(dir / "all.safetensors", std::ios::binary);
    std::uint64_t header_length = 0;
    in.read(reinterpret_cast<char*>(&header_length), 8);
    CHECK(header_length % 8 == 0);
    CHECK_FALSE(fs::exists(dir / "all.safetensors.partial"));
}

TEST_CASE("safetensors BF16 tensors load as float32 with the same values", "[io][safetensors]") {
    // 1, -2.5, 0, +inf, 3.140625 (pi rounded to bfloat16's 8 significant bits)
    const std::uint16_t bits[] = {0x3F80, 0xC020, 0x0000, 0x7F80, 0x4049};
    const std::string header = R"({"w":{"dtype":"BF16","shape":[5],"data_offsets":[0,10]}})";
    auto file = safetensors_file(header, 10);
    std::memcpy(file.data() + 8 + header.size(), bits, sizeof bits);
    const npy::Array w = safetensors::parse(file, "bf16").at("w");
    CHECK(w.type == npy::ElementType::f32);
    CHECK(w.shape == std::vector<std::int64_t>{5});
    REQUIRE(w.data.size() == 5 * sizeof(float));
    const float* f = w.as<float>();
    CHECK(f[0] == 1.0f);
    CHECK(f[1] == -2.5f);
    CHECK(f[2] == 0.0f);
    CHECK(f[3] == std::numeric_limits<float>::infinity());
    CHECK(f[4] == 3.140625f);
}

TEST_CASE("safetensors headers that are valid but unusual are accepted", "[io][safetensors]") {
    SECTION("no tensors at all") { CHECK(safetensors::parse(safetensors_file("{}", 0), "empty").empty()); }
    SECTION("metadata is allowed and ignored") {
        const auto t = safetensors::parse(
            safetensors_file(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4),
            "meta");
        CHECK(t.size() == 1);
        CHECK(t.count("a") == 1);
    }
    SECTION("gaps between tensors and empty tensors anywhere") {
        const auto t = safetensors::parse(safetensors_file(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[6,8]},
            "z":{"dtype":"F32","shape":[0,3],"data_offsets":[7,7]},"b":{"dtype":"BOOL","shape":[1],"data_offsets":[1,2]}})",
                                                           8),
                                          "gaps");
        CHECK(t.at("a").data == std::vector<std::byte>{std::byte{6}, std::byte{7}});
        CHECK(t.at("z").count() == 0);
    }
}

TEST_CASE("safetensors corruptions are rejected with a sentence naming the problem", "[io][safetensors]") {
    const std::string f32_pair = R"("dtype":"F32","shape":[2])";
    struct Case {
        const char* what;
        std::vector<std::byte> file;
        std::vector<std::string> words;
    };
    const std::vector<Case> cases{
        {"truncated length", std::vector<std::byte>(5), {"5 bytes long", "8-byte header length"}},
        {"header longer than the file", safetensors_file("{}", 0, 1000), {"header length 1000", "runs past the end"}},
        {"header over 100 MB", safetensors_file("{}", 0, 200'000'000), {"exceeds the limit of 100000000 bytes"}},
        {"invalid JSON", safetensors_file(R"({"a": )", 0), {"not valid JSON"}},
        {"invalid UTF-8", safetensors_file("{\"\xff\": 1}", 0), {"not valid JSON"}},
        // fuzz_safetensors: a number beyond double escaped the parser as json::out_of_range.
        {"number too large", safetensors_file(R"({"t": 1e999})", 0), {"number too large to represent"}},
        {"number too large in metadata", safetensors_file(R"({"__metadata__": {"k": -2e400}})", 0),
         {"number too large to represent"}},
        {"empty header", safetensors_file("", 0), {"header length is 0"}},
        {"not an object", safetensors_file("[1, 2]", 0), {"is a JSON array", "not an object"}},
        {"entry not an object", safetensors_file(R"({"t": 3})", 0), {"tensor 't'", "JSON number"}},
        {"missing dtype", safetensors_file(R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4), {"tensor 't' has no \"dtype\""}},
        {"missing shape", safetensors_file(R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4), {"no \"shape\""}},
        {"missing offsets", safetensors_file(R"({"t":{"dtype":"F32","shape":[1]}})", 4), {"no \"data_offsets\""}},
        {"unsupported dtype", safetensors_file(R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
         {"dtype F64", "not supported", "BF16"}},
        {"dtype not a string", safetensors_file(R"({"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
         {"\"dtype\" is not a string"}},
        {"negative dimension", safetensors_file(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0),
         {"dimension 0 is -1", "non-negative"}},
        {"dimension over 2^63",
         safetensors_file(R"({"t":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})", 0),
         {"more than the limit of 2^63 - 1"}},
        {"byte size overflowing",
         safetensors_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
         {"overflows 64 bits"}},
        {"fractional dimension", safetensors_file(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
         {"dimension 0 is not an integer"}},
        {"shape not a list", safetensors_file(R"({"t":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})", 12),
         {"\"shape\" is not a list"}},
        {"too many dimensions",
         safetensors_file(R"({"t":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4),
         {"more than 8 elements"}},
        {"nested too deep", safetensors_file(R"({"t":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4),
         {"nests deeper"}},
        {"offsets past the data", safetensors_file("{\"t\":{" + f32_pair + ",\"data_offsets\":[0,8]}}", 4),
         {"data_offsets [0, 8]", "past the end of the data region", "holds 4 bytes"}},
        {"offsets reversed", safetensors_file("{\"t\":{" + f32_pair + ",\"data_offsets\":[8,0]}}", 8),
         {"data_offsets [8, 0] end before they begin"}},
        {"negative offset", safetensors_file("{\"t\":{" + f32_pair + ",\"data_offsets\":[-1,7]}}", 8),
         {"two non-negative integers"}},
        {"three offsets", safetensors_file("{\"t\":{" + f32_pair + ",\"data_offsets\":[0,4,8]}}", 8),
         {"two non-negative integers"}},
        {"size mismatch", safetensors_file("{\"t\":{" + f32_pair + ",\"data_offsets\":[0,4]}}", 8),
         {"tensor 't' has shape [2] of F32", "needs 8 bytes", "hold 4"}},
        {"overlapping tensors",
         safetensors_file("{\"a\":{" + f32_pair + ",\"data_offsets\":[0,8]},\"b\":{" + f32_pair + ",\"data_offsets\":[4,12]}}", 12),
         {"'a' and 'b' overlap", "[0, 8)", "[4, 12)"}},
        {"a name twice",
         safetensors_file("{\"a\":{" + f32_pair + ",\"data_offsets\":[0,8]},\"a\":{" + f32_pair + ",\"data_offsets\":[0,8]}}", 8),
         {"names 'a' twice"}},
        {"metadata not strings", safetensors_file(R"({"__metadata__":{"epoch":3}})", 0), {"__metadata__", "strings to strings"}},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        const std::string message = rejection(c.file);
        for (const std::string& w : c.words) CHECK_THAT(message, Contains(w));
    }
}

TEST_CASE("safetensors write refuses data that does not match its shape and leaves no file", "[io][safetensors]") {
    const fs::path dir = scratch_dir("st-write");
    npy::Array bad = random_array(npy::ElementType::f32, {2, 3}, 1);
    bad.data.resize(20);
    CHECK_THAT(message_of([&] { safetensors::write(dir / "bad.safetensors", {{"w", bad}}); }),
               Contains("'w' holds 20 bytes") && Contains("[2, 3] needs 24"));
    CHECK(fs::is_empty(dir));
}

TEST_CASE("state dicts load from a directory of npy files and from a safetensors file", "[io][state_dict]") {
    const fs::path dir = scratch_dir("sd");
    const npy::Array weight = random_array(npy::ElementType::f32, {8, 8}, 1);
    const npy::Array bias = random_array(npy::ElementType::f32, {24}, 2);
    fs::create_directories(dir / "npy" / "ignored.npy");  // a directory, not a tensor
    npy::write(dir / "npy" / "out_proj.weight.npy", weight.type, weight.shape, weight.data.data());
    npy::write(dir / "npy" / "in_proj_bias.npy", bias.type, bias.shape, bias.data.data());
    std::ofstream(dir / "npy" / "README.txt") << "not a tensor";
    safetensors::write(dir / "w.safetensors", {{"out_proj.weight", weight}, {"in_proj_bias", bias}});

    for (const fs::path& source : {dir / "npy", dir / "w.safetensors"}) {
        INFO(source);
        const StateDict sd = load_state_dict(source);
        CHECK(sd.source == source.string());
        REQUIRE(sd.tensors.size() == 2);
        check_same(sd.require("out_proj.weight", npy::ElementType::f32, {8, 8}), weight);
        check_same(sd.require("in_proj_bias", npy::ElementType::f32, {24}), bias);
        CHECK(sd.find("out_proj.bias", npy::ElementType::f32, {8}) == nullptr);

        CHECK_THAT(message_of([&] { sd.require("q_proj_weight", npy::ElementType::f32, {8, 8}); }),
                   Contains("no tensor 'q_proj_weight'") && Contains("float32 of shape [8, 8]") &&
                       Contains("in_proj_bias, out_proj.weight"));
        CHECK_THAT(message_of([&] { sd.require("in_proj_bias", npy::ElementType::f32, {3, 8}); }),
                   Contains("'in_proj_bias' has shape [24]; expected [3, 8]"));
        CHECK_THAT(message_of([&] { sd.find("out_proj.weight", npy::ElementType::f16, {8, 8}); }),
                   Contains("'out_proj.weight' is float32; expected float16"));
    }
}

TEST_CASE("state dict paths that are neither form are rejected by name", "[io][state_dict]") {
    const fs::path dir = scratch_dir("sd-bad");
    fs::create_directories(dir / "empty");
    std::ofstream(dir / "weights.pt") << "pickle";
    CHECK_THAT(message_of([&] { load_state_dict(dir / "empty"); }), Contains("holds no .npy files"));
    CHECK_THAT(message_of([&] { load_state_dict(dir / "weights.pt"); }),
               Contains("weights.pt") && Contains("neither a directory of .npy files nor a .safetensors file"));
    CHECK_THAT(message_of([&] { load_state_dict(dir / "missing"); }), Contains("missing: does not exist"));
    CHECK_THAT(message_of([&] { load_state_dict(dir / "missing.safetensors"); }), Contains("cannot open the file"));
}

// Each fixture directory (tests/fixtures/mha/generate.py) holds one nn.MultiheadAttention call.
TEST_CASE("every PyTorch MHA fixture loads the same weights from npy files and safetensors", "[io][fixtures]") {
    const fs::path root = VKATTN_MHA_FIXTURES;
    std::vector<fs::path> cases;
    for (const auto& entry : fs::directory_iterator(root))
        if (entry.is_directory()) cases.push_back(entry.path());
    REQUIRE(cases.size() >= 8);

    for (const fs::path& dir : cases) {
        INFO(dir);
        nlohmann::json c;
        std::ifstream(dir / "case.json") >> c;
        const std::int64_t E = c.at("embed_dim"), H = c.at("num_heads"), kdim = c.at("kdim"), vdim = c.at("vdim");
        const std::int64_t N = c.at("batch"), L = c.at("tgt_len"), S = c.at("src_len");
        const bool packed = kdim == E && vdim == E, bias = c.at("bias"), batch_first = c.at("batch_first");

        const StateDict from_npy = load_state_dict(dir / "weights");
        const StateDict from_safetensors = load_state_dict(dir / "weights.safetensors");
        REQUIRE(from_npy.tensors.size() == from_safetensors.tensors.size());
        for (const auto& [key, a] : from_npy.tensors) {
            INFO(key);
            REQUIRE(from_safetensors.tensors.count(key) == 1);
            check_same(from_safetensors.tensors.at(key), a);
        }

        // PyTorch's state_dict() keys: one packed projection when kdim == vdim == embed_dim.
        const auto f32 = npy::ElementType::f32;
        std::size_t expected_keys = 1 + (packed ? 1 : 3) + (bias ? 2 : 0);
        from_npy.require("out_proj.weight", f32, {E, E});
        if (packed) {
            from_npy.require("in_proj_weight", f32, {3 * E, E});
        } else {
            from_npy.require("q_proj_weight", f32, {E, E});
            from_npy.require("k_proj_weight", f32, {E, kdim});
            from_npy.require("v_proj_weight", f32, {E, vdim});
        }
        if (bias) {
            from_npy.require("in_proj_bias", f32, {3 * E});
            from_npy.require("out_proj.bias", f32, {E});
        }
        CHECK(from_npy.tensors.size() == expected_keys);

        // The call's inputs and outputs, in the layout batch_first names.
        auto layout = [&](std::int64_t n, std::int64_t d) {
            return batch_first ? std::vector<std::int64_t>{N, n, d} : std::vector<std::int64_t>{n, N, d};
        };
        auto check_file = [&](const char* file, npy::ElementType type, const std::vector<std::int64_t>& shape) {
            INFO(file);
            const npy::Array a = npy::read(dir / file);
            CHECK(a.type == type);
            CHECK(a.shape == shape);
        };
        check_file("query.npy", f32, layout(L, E));
        check_file("key.npy", f32, layout(S, kdim));
        check_file("value.npy", f32, layout(S, vdim));
        check_file("out.npy", f32, layout(L, E));
        auto mask_type = [](const nlohmann::json& t) { return t == "bool" ? npy::ElementType::boolean : npy::ElementType::f32; };
        if (!c.at("key_padding_mask").is_null()) check_file("key_padding_mask.npy", mask_type(c["key_padding_mask"]), {N, S});
        CHECK(fs::exists(dir / "key_padding_mask.npy") == !c.at("key_padding_mask").is_null());
        if (!c.at("attn_mask").is_null())
            check_file("attn_mask.npy", mask_type(c["attn_mask"]),
                       c.at("attn_mask_rank") == 2 ? std::vector<std::int64_t>{L, S} : std::vector<std::int64_t>{N * H, L, S});
        CHECK(fs::exists(dir / "attn_mask.npy") == !c.at("attn_mask").is_null());
        if (c.at("need_weights"))
            check_file("attn_weights.npy", f32,
                       c.at("average_attn_weights") ? std::vector<std::int64_t>{N, L, S} : std::vector<std::int64_t>{N, H, L, S});
        CHECK(fs::exists(dir / "attn_weights.npy") == bool(c.at("need_weights")));
    }
}

// The fuzzers' seeds (fuzz/corpus) say in their names whether they are valid: keep that true.
TEST_CASE("fuzz seed files parse or fail as their names say", "[io][fuzz]") {
    const fs::path root = VKATTN_FUZZ_CORPUS;
    int seeds = 0;
    for (const char* format : {"npy", "safetensors"}) {
        for (const auto& entry : fs::directory_iterator(root / format)) {
            const std::string file = entry.path().filename().string();
            INFO(entry.path());
            const bool valid = file.rfind("valid_", 0) == 0;
            REQUIRE((valid || file.rfind("invalid_", 0) == 0));
            auto parse = [&] {
                if (std::string(format) == "npy") npy::read(entry.path());
                else safetensors::read(entry.path());
            };
            if (valid) CHECK_NOTHROW(parse());
            else CHECK_THROWS_AS(parse(), InvalidArgument);
            ++seeds;
        }
    }
    CHECK(seeds >= 6);
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

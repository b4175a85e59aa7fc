// The .safetensors format (io/safetensors.cpp): round trips for every dtype, BF16 read as float32,
// unusual valid headers, and every corruption a reader must refuse, each named in a sentence.
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

}  // namespace

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

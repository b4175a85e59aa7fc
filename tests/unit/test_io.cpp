// The tensor file formats (io/): .npy and .safetensors round trips for every dtype, every corruption
// a .safetensors reader must refuse (each with the words that tell a user what is wrong), state
// dicts from both exports, and the PyTorch fixtures of tests/fixtures/mha loaded both ways.
#include <catch2/catch.hpp>

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
using Catch::Matchers::Contains;
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
                                              npy::ElementType::i32, npy::ElementType::i64};

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

// State dicts (io/state_dict.cpp) from both exports, the PyTorch fixtures of tests/fixtures/mha
// loaded both ways, and the fuzzers' seeds parsing or failing as their names say.
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

// vk-attn mha: PyTorch's nn.MultiheadAttention fixtures, forward and autograd's gradients, and its
// bad input named.
#include "cli/cli_support.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::cli_test;

TEST_CASE("cli mha: a PyTorch fixture from both weight formats matches PyTorch's output", "[cli][mha]") {
    const fs::path dir = fs::path(VKATTN_FIXTURES) / "mha" / "data" / "cross_mask3d_bool_kpm_bool";
    const auto meta = nlohmann::json::parse(std::ifstream(dir / "case.json"));
    REQUIRE(meta["batch_first"] == true);
    REQUIRE(meta["need_weights"] == true);
    Workdir out;
    const std::string weights = GENERATE("weights", "weights.safetensors");
    const std::string impl = GENERATE("auto", "unfused");
    const Result r = vk_attn("mha --query " + (dir / "query.npy").string() + " --key " + (dir / "key.npy").string() +
                             " --value " + (dir / "value.npy").string() + " --weights " + (dir / weights).string() +
                             " --num-heads " + std::to_string(meta["num_heads"].get<int>()) + " --batch-first" +
                             " --key-padding-mask " + (dir / "key_padding_mask.npy").string() + " --attn-mask " +
                             (dir / "attn_mask.npy").string() + " --need-weights --impl " + impl + " --out " + out / "o.npy" +
                             " --attn-weights " + out / "w.npy");
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains("unfused"));  // the weights need the three-stage path; it is reported
    for (const auto& [got, want] : {std::pair{out / "o.npy", dir / "out.npy"}, std::pair{out / "w.npy", dir / "attn_weights.npy"}}) {
        const npy::Array g = npy::read(got), w = npy::read(want);
        CHECK(g.shape == w.shape);
        const Comparison c = compare({g.as<float>(), g.as<float>() + g.count()}, {w.as<float>(), w.as<float>() + w.count()},
                                     tolerance_for(DType::f32));
        INFO(want << ": " << c.message);
        CHECK(c.ok);
    }
}

TEST_CASE("cli mha: bad input exits 1 with one line naming the flag or file, writing nothing", "[cli][mha]") {
    const fs::path fixture = fs::path(VKATTN_FIXTURES) / "mha" / "data" / "self_packed";
    Workdir dir;
    std::mt19937 rng(21);
    const std::string q = (fixture / "query.npy").string(), w = (fixture / "weights").string();
    const auto meta = nlohmann::json::parse(std::ifstream(fixture / "case.json"));
    const std::string heads = std::to_string(meta["num_heads"].get<int>());
    write_tensor(rng, dir / "mask.npy", {3, 3}, false);
    fs::create_directories(dir / "empty");
    { std::ofstream(dir / "bad.safetensors") << "not a safetensors file"; }
    const std::vector<std::pair<std::string, std::string>> cases{
        {"--query " + q + " --weights " + dir / "missing" + " --num-heads " + heads, "--weights"},
        {"--query " + q + " --weights " + dir / "empty" + " --num-heads " + heads, "--weights"},
        {"--query " + q + " --weights " + dir / "bad.safetensors" + " --num-heads " + heads, "bad.safetensors"},
        {"--query " + q + " --weights " + w + " --num-heads 5", "--num-heads"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --attn-mask " + dir / "mask.npy", "--attn-mask"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --need-weights", "--attn-weights"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --key " + q, "--value"},
        {"--query " + dir / "mask.npy" + " --weights " + w + " --num-heads " + heads, "--query"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --dtype f64", "--dtype"},
    };
    for (const auto& [flags, names] : cases) {
        const Result r = vk_attn("mha " + flags + " --out " + dir / "o.npy");
        INFO("vk-attn mha " << flags << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, Catch::Contains(names));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o.npy"));
    }
}

TEST_CASE("cli mha --grad-out --grads: PyTorch autograd's gradients, one file per input and parameter", "[cli][mha][backward]") {
    // Cross-attention with kdim and vdim: separate q/k/v_proj_weight and three input gradients; and
    // self-attention: in_proj_weight, the query's gradient alone.
    for (const char* name : {"cross_kdim_vdim_mask2d_bool", "self_packed"}) {
        const fs::path dir = fs::path(VKATTN_FIXTURES) / "mha" / "data" / name;
        const auto meta = nlohmann::json::parse(std::ifstream(dir / "case.json"));
        const bool self = meta["self_attention"].get<bool>();
        INFO(name);
        Workdir out;
        std::string flags = "mha --query " + (dir / "query.npy").string() + " --weights " + (dir / "weights").string() +
                            " --num-heads " + std::to_string(meta["num_heads"].get<int>()) + " --out " + out / "o.npy" +
                            " --grad-out " + (dir / "grad_out.npy").string() + " --grads " + out / "grads" + " --impl unfused";
        if (!self) flags += " --key " + (dir / "key.npy").string() + " --value " + (dir / "value.npy").string();
        if (fs::exists(dir / "attn_mask.npy")) flags += " --attn-mask " + (dir / "attn_mask.npy").string();
        const Result r = vk_attn(flags);
        INFO(r.err);
        REQUIRE(r.status == 0);
        CHECK_THAT(r.err, Catch::Contains("backward: attention unfused"));
        std::vector<std::string> want, got;
        for (const auto& e : fs::directory_iterator(dir / "grads")) want.push_back(e.path().filename().string());
        const fs::path written(out / "grads");
        for (const auto& e : fs::directory_iterator(written)) got.push_back(e.path().filename().string());
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        CHECK(got == want);
        for (const std::string& file : want) {
            if (!fs::exists(written / file)) continue;
            const npy::Array g = npy::read(written / file), w = npy::read(dir / "grads" / file);
            CHECK(g.shape == w.shape);
            const Comparison c = compare({g.as<float>(), g.as<float>() + g.count()}, {w.as<float>(), w.as<float>() + w.count()},
                                         gradient_tolerance_for(DType::f32));
            INFO(file << ": " << c.message);
            CHECK(c.ok);
        }
    }
    // Refusals: one line naming the flag, nothing written (neither the output nor the directory).
    const fs::path fixture = fs::path(VKATTN_FIXTURES) / "mha" / "data" / "self_packed";
    Workdir dir;
    const std::string base = "mha --query " + (fixture / "query.npy").string() + " --weights " + (fixture / "weights").string() +
                             " --num-heads 2 --out " + dir / "o.npy";
    std::mt19937 rng(5);
    write_tensor(rng, dir / "short.npy", {5, 2, 7}, false);
    for (const auto& [flags, names] : std::vector<std::pair<std::string, std::string>>{
             {" --grad-out " + (fixture / "grad_out.npy").string(), "--grads"},
             {" --grads " + dir / "g", "--grad-out"},
             {" --grad-out " + dir / "short.npy" + " --grads " + dir / "g", "--grad-out"}}) {
        const Result r = vk_attn(base + flags);
        INFO(flags << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, Catch::Contains(names));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o.npy"));
        CHECK_FALSE(fs::exists(dir / "g"));
    }
}

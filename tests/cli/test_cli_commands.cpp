// vk-attn check, tune and decode, the catalogue's variants forced by name, and --help on every
// subcommand.
#include "cli/cli_support.hpp"

#include <sstream>

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::cli_test;

// The tool's self-check, narrowed to one path and dtype: the GPU tests cover the kernels it runs
// (the whole matrix takes minutes on a CPU device); this covers the command.
TEST_CASE("cli check: passes on this device", "[cli]") {
    const Result r = vk_attn("check --impl unfused,split --dtype f32");
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains(" 0 failed") && Catch::Contains("unfused") && Catch::Contains("split"));
    CHECK_THAT(r.out, !Catch::Contains("  fused ") && !Catch::Contains(" f16 "));
    const Result bad = vk_attn("check --impl auto");
    CHECK(bad.status == 1);
    CHECK_THAT(bad.err, Catch::Contains("--impl"));
    // --json: a line per case (streamed, so a time-boxed run keeps the cases it finished), then the totals.
    const Result lines = vk_attn("check --variants split-flash-streamed --dtype f32 --json");
    INFO(lines.out << lines.err);
    CHECK(lines.status == 0);
    int cases = 0;
    nlohmann::json last;
    std::istringstream in(lines.out);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] != '{') continue;
        last = nlohmann::json::parse(line);
        if (last.contains("case")) {
            ++cases;
            CHECK(last["result"] == "pass");
            CHECK(last["impl"] == "split");
        }
    }
    CHECK(cases > 0);
    CHECK(last["passed"] == cases);
    CHECK(last["failed"] == 0);
}

TEST_CASE("cli tune: the winners written beside the pipeline cache, then chosen by bench", "[cli][tuner]") {
    const Workdir dir;
    // The suite turns tables off (VKATTN_TUNING=off in its environment): these commands turn them on.
    const std::string program = "VKATTN_TUNING=on XDG_CACHE_HOME=" + dir.path.string() + " " + VK_ATTN_PATH;
    const Result tuned = vk_attn_with(program, "tune --quick --variants flash-streamed,split-flash-streamed --warmup 0 --repeat 1");
    INFO(tuned.out << tuned.err);
    REQUIRE(tuned.status == 0);
    CHECK_THAT(tuned.out, Catch::Contains("flash-streamed") && Catch::Contains("*") && Catch::Contains("table: "));
    // The quick grid's backward shape times the backward's catalogue (none of it named: all of it).
    CHECK_THAT(tuned.out, Catch::Contains("backward-fused") && Catch::Contains("backward-unfused"));
    CHECK_FALSE(fs::is_empty(dir.path / "vkattn"));
    // A decode point in the quick grid's decode bucket (512 keys) runs the winner.
    const Result point = vk_attn_with(program, "bench --seq 1 --kv-seq 500 --heads 8 --kv-heads 2 --dim 64 --causal "
                                               "--repeat 1 --warmup 0 --json");
    INFO(point.out << point.err);
    CHECK(point.status == 0);
    CHECK_THAT(point.out, Catch::Contains("\"chosen_by\":\"tuning\""));
    const Result off = vk_attn_with("VKATTN_TUNING=off XDG_CACHE_HOME=" + dir.path.string() + " " + VK_ATTN_PATH,
                                    "bench --seq 1 --kv-seq 500 --heads 8 --kv-heads 2 --dim 64 --causal --repeat 1 "
                                    "--warmup 0 --json");
    CHECK_THAT(off.out, Catch::Contains("\"chosen_by\":\"heuristics\""));
    // A backward in the quick grid's backward bucket runs its winner.
    const Result training = vk_attn_with(program, "bench --backward --seq 60 --heads 2 --dim 32 --causal "
                                                  "--repeat 1 --warmup 0 --json");
    INFO(training.out << training.err);
    CHECK(training.status == 0);
    CHECK_THAT(training.out, Catch::Contains("\"chosen_by\":\"tuning\""));
    // A backward variant by name is the caller's; a forward one is no backward variant.
    const Result named = vk_attn_with(program, "bench --backward --seq 60 --heads 2 --dim 32 --causal --variant backward-unfused "
                                               "--repeat 1 --warmup 0 --validate --json");
    INFO(named.out << named.err);
    CHECK(named.status == 0);
    CHECK_THAT(named.out, Catch::Contains("\"chosen_by\":\"caller\"") && Catch::Contains("\"path\":\"unfused\""));
    const Result forward_name = vk_attn_with(program, "bench --backward --seq 60 --heads 2 --dim 32 --variant tile");
    CHECK(forward_name.status == 1);
    CHECK_THAT(forward_name.err, Catch::Contains("backward-fused"));
    const Result bad = vk_attn_with(program, "tune --quick --variants nope");
    CHECK(bad.status == 1);
    CHECK_THAT(bad.err, Catch::Contains("variants"));
}

TEST_CASE("cli check --variants and bench --variant: the catalogue's kernel variants forced by name", "[cli]") {
    // Two variants of the GPU kernels over the check matrix, each on its own path.
    const Result r = vk_attn("check --variants split-decode,tile --dtype f32");
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains(" 0 failed") && Catch::Contains("split-decode") && Catch::Contains("tile"));
    CHECK_THAT(r.out, !Catch::Contains("unfused") && !Catch::Contains("tuned"));
    const Result point = vk_attn("bench --seq 1 --kv-seq 300 --heads 8 --kv-heads 2 --dim 64 --variant split-decode "
                                 "--repeat 1 --warmup 0 --validate --json");
    INFO(point.out << point.err);
    CHECK(point.status == 0);
    CHECK_THAT(point.out, Catch::Contains("\"impl\":\"split\"") && Catch::Contains("decode["));
    // The cooperative-matrix kernel at f32: validated on the f16 operands it multiplied.
    const Result coopmat = vk_attn("bench --seq 70 --heads 2 --dim 40 --fused-kernel coopmat --impl fused "
                                   "--repeat 1 --warmup 0 --validate --json");
    INFO(coopmat.out << coopmat.err);
    CHECK(coopmat.status == 0);
    CHECK_THAT(coopmat.out, Catch::Contains("\"impl\":\"fused\"") && Catch::Contains("coopmat["));
    const Result training = vk_attn("bench --seq 40 --heads 2 --dim 24 --fused-kernel coopmat --backward "
                                    "--repeat 1 --warmup 0 --validate --json");
    INFO(training.out << training.err);
    CHECK(training.status == 0);
    CHECK_THAT(training.out, Catch::Contains("backward-coopmat["));
    // bf16 storage on the kernel's bf16 operands over the check matrix (reported unavailable, not
    // failed, on matrix units that do not take bf16).
    const Result bf16 = vk_attn("check --variants coopmat --dtype bf16 --json");
    INFO(bf16.out << bf16.err);
    CHECK(bf16.status == 0);
    CHECK_THAT(bf16.out, Catch::Contains("\"dtype\":\"bf16\"") && Catch::Contains("\"failed\":0"));
    for (const std::string args : {"check --variants nope", "bench --variant nope"}) {
        const Result bad = vk_attn(args);
        CHECK(bad.status == 1);
        CHECK_THAT(bad.err, Catch::Contains("--variant") && Catch::Contains("split-decode"));
    }
}

TEST_CASE("cli decode --validate --json: the device loop and the host round trip, every step checked", "[cli][decode]") {
    for (const std::string mode : {"", " --host-roundtrip", " --paged --block-size 5"})
        for (const std::string dtype : {"f32", "f16"}) {
            const Result r = vk_attn("decode --batch 3 --heads 4 --kv-heads 2 --dim 40 --dim-v 24 --prompt 23,0,61 "
                                     "--steps 4 --repeat 2 --validate --json --dtype " + dtype + mode);
            INFO(mode << " " << dtype << ": " << r.err);
            REQUIRE(r.status == 0);
            const auto j = nlohmann::json::parse(r.out);
            for (const char* key : {"ms_per_step", "host_us_per_step", "gpu_ms_per_step", "tokens_per_s", "max_rel_err",
                                    "valid", "path", "paged", "block_size", "prompt", "prompts", "steps"})
                CHECK(j.contains(key));
            CHECK(j["mode"] == (mode == " --host-roundtrip" ? "host-roundtrip" : "device"));
            CHECK(j["paged"] == (mode == " --paged --block-size 5"));
            CHECK(j["block_size"] == (mode == " --paged --block-size 5" ? 5 : 0));
            CHECK(j["valid"] == true);
            CHECK(j["max_rel_err"].get<double>() <= tolerance_for(dtype == "f32" ? DType::f32 : DType::f16).rel);
            CHECK(j["prompt"] == 61);
            CHECK(j["steps"] == 4);
            CHECK(j["ms_per_step"].get<double>() > 0);
            CHECK(j["tokens_per_s"].get<double>() > 0);
        }
    for (const char* impl : {"fused", "split", "unfused"}) {
        const Result r = vk_attn(std::string("decode --heads 2 --dim 16 --prompt 70 --steps 2 --validate --json --impl ") + impl);
        INFO(impl << ": " << r.err);
        REQUIRE(r.status == 0);
        CHECK(nlohmann::json::parse(r.out)["path"] == impl);
    }
    for (const char* impl : {"fused", "split"}) {
        const Result r = vk_attn(std::string("decode --heads 2 --dim 16 --prompt 70 --steps 2 --paged --block-size 16 "
                                             "--validate --json --impl ") + impl);
        INFO(impl << ": " << r.err);
        REQUIRE(r.status == 0);
        CHECK(nlohmann::json::parse(r.out)["path"] == impl);
    }
}

TEST_CASE("cli decode: bad flags exit 1 naming the flag", "[cli][decode]") {
    const Result prompts = vk_attn("decode --batch 3 --prompt 4,5");
    CHECK(prompts.status == 1);
    CHECK_THAT(prompts.err, Catch::Contains("--prompt") && Catch::Contains("batch of 3"));
    const Result negative = vk_attn("decode --prompt -4");
    CHECK(negative.status == 1);
    CHECK_THAT(negative.err, Catch::Contains("--prompt"));
    const Result heads = vk_attn("decode --heads 6 --kv-heads 4 --prompt 8 --steps 1");
    CHECK(heads.status == 1);
    CHECK_THAT(heads.err, Catch::Contains("kv"));
    const Result impl = vk_attn("decode --impl flash");
    CHECK(impl.status == 1);
    CHECK_THAT(impl.err, Catch::Contains("--impl"));
    const Result roundtrip = vk_attn("decode --paged --host-roundtrip --prompt 8 --steps 1");
    CHECK(roundtrip.status == 1);
    CHECK_THAT(roundtrip.err, Catch::Contains("--paged"));
    const Result block = vk_attn("decode --block-size 8 --prompt 8 --steps 1");
    CHECK(block.status == 1);
    CHECK_THAT(block.err, Catch::Contains("--paged"));
    const Result unfused = vk_attn("decode --paged --impl unfused --prompt 8 --steps 1");
    CHECK(unfused.status == 1);
    CHECK_THAT(unfused.err, Catch::Contains("impl") && Catch::Contains("paged"));
}

TEST_CASE("cli: --help on every subcommand, unknown flags exit 1", "[cli]") {
    for (const char* sub : {"bench", "run", "mha", "check", "devices", "decode"}) {
        const Result r = vk_attn(std::string(sub) + " --help");
        CHECK(r.status == 0);
        CHECK_THAT(r.out, Catch::Contains("Usage"));
    }
    const Result r = vk_attn("bench --no-such-flag");
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Catch::Contains("no-such-flag"));
}

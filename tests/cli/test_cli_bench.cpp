// vk-attn bench: its JSON, CSV and table, the feature flags, the GEMM and copy ceilings, how a
// point is timed, the forced kernels and storage types, validated; the plot.
#include "cli/cli_support.hpp"

#include <sstream>
#include <tuple>

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::cli_test;

TEST_CASE("cli bench: feature flags appear in the output and count only visible pairs", "[cli][features]") {
    const Result full = vk_attn("bench --heads 1 --seq 256 --dim 8 --repeat 1 --warmup 0 --impl fused --causal --json");
    const Result windowed = vk_attn("bench --heads 1 --seq 256 --dim 8 --repeat 1 --warmup 0 --impl fused --causal "
                                    "--window=15,-1 --softcap 30 --validate --json");
    INFO(full.err << windowed.err);
    REQUIRE(full.status == 0);
    REQUIRE(windowed.status == 0);
    const auto f = nlohmann::json::parse(full.out), w = nlohmann::json::parse(windowed.out);
    CHECK(w["features"] == "window=15,-1 softcap=30");
    CHECK(w["valid"] == true);
    // GFLOP/s · ms = the flops counted: 256·257/2 causal pairs against 16·256 - 120 windowed ones.
    const double counted_full = f["gflops"].get<double>() * f["median_ms"].get<double>();
    const double counted_window = w["gflops"].get<double>() * w["median_ms"].get<double>();
    CHECK(counted_window / counted_full == Approx((16.0 * 256 - 120) / (256.0 * 257 / 2)).epsilon(1e-3));
}

TEST_CASE("cli bench --json: one object per point with the documented keys", "[cli]") {
    const Result r = vk_attn("bench --batch 1 --heads 2 --seq 16,40 --dim 8 --repeat 2 --warmup 1 --validate --json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    std::istringstream lines(r.out);
    int points = 0;
    for (std::string line; std::getline(lines, line);) {
        const auto j = nlohmann::json::parse(line);
        for (const char* key : {"impl", "dtype", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "dim", "dim_v",
                                "causal", "median_ms", "min_ms", "max_ms", "gflops", "gbps", "rel_l2_err", "valid"})
            CHECK(j.contains(key));
        CHECK(j["gflops"].get<double>() > 0);
        CHECK(j["valid"] == true);
        CHECK(j["rel_l2_err"].get<double>() >= 0);
        CHECK(j["rel_l2_err"].get<double>() <= tolerance_for(DType::f32).rel);
        ++points;
    }
    CHECK(points == 2);
    const Result g = vk_attn("bench --seq 16 --dim 8 --repeat 1 --gemm --gemm-size 64 --validate --json");
    REQUIRE(g.status == 0);
    const auto first = nlohmann::json::parse(g.out.substr(0, g.out.find('\n')));
    CHECK(first["impl"] == "gemm");
    for (const char* key : {"m", "n", "k", "median_ms", "gflops", "rel_l2_err"}) CHECK(first.contains(key));
    // --gemm-kernel forces the ceiling's kernel, and the points' products with it.
    // coopmat: the ceiling alone, on f16 operands (the points keep the tuning's products); the
    // reference multiplies the same f16 values, so only fp32 accumulation separates them.
    for (const std::string kernel : {"blocks", "tile", "coopmat"}) {
        const Result forced = vk_attn("bench --seq 16 --dim 8 --repeat 1 --gemm --gemm-size 70 --validate --json --impl unfused "
                                      "--gemm-kernel " + kernel);
        INFO(forced.err);
        REQUIRE(forced.status == 0);
        const auto gemm_row = nlohmann::json::parse(forced.out.substr(0, forced.out.find('\n')));
        CHECK(gemm_row["rel_l2_err"].get<double>() <= tolerance_for(DType::f32).rel);
        const std::string variant = gemm_row["variant"];
        CHECK((variant.find(" f16 operands") != std::string::npos) == (kernel == "coopmat"));
        CHECK((variant.rfind("gemm tile", 0) == 0) == (kernel == "tile"));
        CHECK((variant.rfind("gemm coopmat", 0) == 0) == (kernel == "coopmat"));
        CHECK_THAT(forced.out, Catch::Contains(kernel == "tile" ? "scores[tile " : "scores[texel/"));
    }
    CHECK(vk_attn("bench --gemm-kernel nope").status != 0);
}

TEST_CASE("cli bench --gemm-shape: the cooperative-matrix GEMM's shapes, 16-byte loads where the operands allow", "[cli]") {
    // 72 = 9 chunks of 8: f16 rows on 16 bytes, so the shape's 16-byte loads run unless it says
    // words; 70 cannot take them.
    for (const auto& [size, shape, loads] : {std::tuple{72, "1x2,2x4,16,2", "16-byte loads"},
                                             std::tuple{72, "2x1,2x2,32,1,words", "typed loads"},
                                             std::tuple{70, "1x2,2x4,16,2", "typed loads"}}) {
        const Result r = vk_attn("bench --seq 16 --dim 8 --repeat 1 --gemm --gemm-size " + std::to_string(size) +
                                 " --validate --json --gemm-kernel coopmat --gemm-shape " + shape);
        INFO(r.err);
        REQUIRE(r.status == 0);
        const auto gemm_row = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
        CHECK(gemm_row["rel_l2_err"].get<double>() <= tolerance_for(DType::f32).rel);
        const std::string variant = gemm_row["variant"];
        CHECK_THAT(variant, Catch::Contains(std::string("shape ") + shape) && Catch::Contains(loads));
    }
    // tune: every candidate shape timed (a row each) or skipped by name where the device cannot take it.
    const Result tuned = vk_attn("bench --seq 16 --dim 8 --repeat 1 --warmup 0 --gemm --gemm-size 40 --validate --json "
                                 "--gemm-kernel coopmat --gemm-shape tune");
    INFO(tuned.err);
    REQUIRE(tuned.status == 0);
    std::size_t rows = 0, skipped = 0;
    for (std::size_t at = 0; (at = tuned.out.find("\"impl\":\"gemm\"", at)) != std::string::npos; ++at) ++rows;
    for (std::size_t at = 0; (at = tuned.err.find("skipped", at)) != std::string::npos; ++at) ++skipped;
    CHECK(rows >= 1);
    CHECK(rows + skipped == gemm_shapes().size());
    // Refused by name: without the coopmat ceiling, not of the form, or past the device.
    for (const auto& [args, says] : {std::pair{"--gemm --gemm-shape 2x2,2x2,16,2", "--gemm-shape"},
                                     std::pair{"--gemm --gemm-kernel coopmat --gemm-shape 2x2,2x2", "--gemm-shape"},
                                     std::pair{"--gemm --gemm-kernel coopmat --gemm-shape 2x2,2x2,16,3", "variant.gemm_shape"},
                                     std::pair{"--gemm --gemm-kernel coopmat --gemm-shape 4x4,4x4,128,2", "variant.gemm_shape"}}) {
        const Result r = vk_attn(std::string("bench --seq 16 --dim 8 --repeat 1 --gemm-size 64 ") + args);
        INFO(args << ": " << r.err);
        CHECK(r.status != 0);
        CHECK_THAT(r.err, Catch::Contains(says));
    }
}

TEST_CASE("cli bench --gemm-operands bf16: the cooperative-matrix GEMM on bf16 operands", "[cli]") {
    // Where bf16 runs (portably, or on units that take it): validated, its variant says bf16; on
    // units without bf16, refused naming the argument. Without the coopmat ceiling, refused by name.
    const Result r = vk_attn("bench --seq 16 --dim 8 --repeat 1 --warmup 0 --gemm --gemm-size 72 --validate --json "
                             "--gemm-kernel coopmat --gemm-operands bf16");
    INFO(r.err);
    const Result devices = vk_attn("devices --json");
    REQUIRE(devices.status == 0);
    bool runs = true;  // one JSON object per device, a line each
    std::istringstream lines(devices.out);
    for (std::string line; std::getline(lines, line);) {
        const auto d = nlohmann::json::parse(line);
        if (d["default_choice"].get<bool>()) runs = !d["matrix_units"].get<bool>() || d["bf16_matrix_units"].get<bool>();
    }
    if (runs) {
        REQUIRE(r.status == 0);
        const auto gemm_row = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
        CHECK(gemm_row["rel_l2_err"].get<double>() <= tolerance_for(DType::f32).rel);
        CHECK_THAT(gemm_row["variant"].get<std::string>(), Catch::Contains("bf16 operands") && Catch::Contains("16-byte loads"));
    } else {
        CHECK(r.status != 0);
        CHECK_THAT(r.err, Catch::Contains("bf16_matrix_units_off"));
    }
    const Result refused = vk_attn("bench --seq 16 --dim 8 --repeat 1 --gemm --gemm-operands bf16");
    CHECK(refused.status != 0);
    CHECK_THAT(refused.err, Catch::Contains("--gemm-operands"));
    CHECK(vk_attn("bench --gemm --gemm-kernel coopmat --gemm-operands f32").status != 0);
}

TEST_CASE("cli bench --inputs, --warmup-ms: how each point was timed, and at what clock", "[cli]") {
    // device (the default): uploaded once, the runs back to back; host: each run a host call. Both say
    // so, with the warm-up runs made and, where the device reads a shader clock, the clock after.
    const Result device = vk_attn("bench --heads 2 --seq 40 --dim 8 --repeat 2 --warmup 3 --warmup-ms 0 --validate --json");
    const Result host = vk_attn("bench --heads 2 --seq 40 --dim 8 --repeat 2 --warmup 1 --warmup-ms 0 --inputs host --validate --json");
    INFO(device.err << host.err);
    REQUIRE(device.status == 0);
    REQUIRE(host.status == 0);
    const auto d = nlohmann::json::parse(device.out), h = nlohmann::json::parse(host.out);
    CHECK(d["inputs"] == "device");
    CHECK(h["inputs"] == "host");
    CHECK(d["warmup_runs"] == 3);
    CHECK(h["warmup_runs"] == 1);
    CHECK(d["variant"] == h["variant"]);
    CHECK(d["valid"] == true);
    CHECK(d.contains("sm_mhz") == h.contains("sm_mhz"));
    if (d.contains("sm_mhz")) CHECK(d["sm_mhz"].get<double>() > 0);
    // A time: at least one run after the first, until 100 ms have passed.
    const Result timed = vk_attn("bench --heads 2 --seq 40 --dim 8 --repeat 1 --warmup 0 --warmup-ms 100 --json");
    REQUIRE(timed.status == 0);
    CHECK(nlohmann::json::parse(timed.out)["warmup_runs"].get<int>() >= 2);
    CHECK(vk_attn("bench --seq 16 --dim 8 --inputs disk").status != 0);
    CHECK(vk_attn("bench --seq 16 --dim 8 --warmup-ms -5").status != 0);
}

TEST_CASE("cli bench --validate: the table and CSV name the error column as JSON does", "[cli]") {
    const Result table = vk_attn("bench --heads 1 --seq 16 --dim 8 --repeat 1 --warmup 0 --validate");
    INFO(table.err);
    REQUIRE(table.status == 0);
    CHECK_THAT(table.out, Catch::Contains("rel_l2_err") && Catch::Contains("valid"));
    const Result csv = vk_attn("bench --heads 1 --seq 16 --dim 8 --repeat 1 --warmup 0 --validate --csv");
    REQUIRE(csv.status == 0);
    CHECK_THAT(csv.out.substr(0, csv.out.find('\n')), Catch::Contains(",rel_l2_err,valid,"));
}

TEST_CASE("cli bench --shared-tiles: forces the fused kernel's staged or streamed K/V, validated", "[cli]") {
    for (const auto& [flag, ran] : {std::pair<std::string, std::string>{"on", " staged"}, {"off", " streamed"}}) {
        const Result r = vk_attn("bench --heads 2 --seq 70 --dim 24 --repeat 1 --warmup 0 --impl fused --causal "
                                 "--validate --json --shared-tiles " + flag);
        INFO(r.err);
        REQUIRE(r.status == 0);
        const auto j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
        CHECK(j["valid"] == true);
        CHECK_THAT(j["variant"].get<std::string>(), Catch::Contains(ran));
    }
    const Result bad = vk_attn("bench --seq 16 --dim 8 --shared-tiles maybe");
    CHECK(bad.status != 0);
    CHECK_THAT(bad.err, Catch::Contains("--shared-tiles"));
}

TEST_CASE("cli bench --dtype bf16 --kv-dtype: storage types, validated, texels or words as forced", "[cli]") {
    const Result r = vk_attn("bench --heads 4 --kv-heads 2 --seq 37 --kv-seq 70 --dim 64 --repeat 1 --warmup 0 --impl split "
                             "--validate --json --dtype bf16 --kv-dtype q5_0");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
    CHECK(j["valid"] == true);
    CHECK(j["kv_dtype"] == "q5_0");
    CHECK_THAT(j["variant"].get<std::string>(), Catch::Contains("words"));
    for (const auto& [flag, ran] : {std::pair<std::string, std::string>{"on", "fused[texel"}, {"off", "fused[words"}}) {
        const Result t = vk_attn("bench --heads 2 --seq 33 --dim 32 --repeat 1 --warmup 0 --impl fused --validate --json "
                                 "--dtype f32 --kv-dtype f16 --texel-loads " + flag);
        INFO(t.err);
        REQUIRE(t.status == 0);
        CHECK_THAT(t.out, Catch::Contains(ran));
    }
    const Result bad = vk_attn("bench --seq 16 --dim 40 --kv-dtype q8_0");
    CHECK(bad.status == 1);
    CHECK_THAT(bad.err, Catch::Contains("multiple of 32"));
}

TEST_CASE("cli bench --kv-dtype fp8 --kv-scale --copy: validated beside the copy ceiling; a scale for another type names the flag", "[cli]") {
    const Result r = vk_attn("bench --heads 2 --seq 9 --kv-seq 40 --dim 24 --repeat 1 --warmup 0 --impl fused --validate "
                             "--json --kv-dtype fp8_e4m3 --kv-scale 0.25");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
    CHECK(j["valid"] == true);
    CHECK(j["kv_dtype"] == "fp8_e4m3");
    // The copy ceiling beside the point: K/V bytes per second against it.
    const Result c = vk_attn("bench --seq 1 --kv-seq 64 --dim 32 --repeat 1 --warmup 0 --impl split --validate --json "
                             "--kv-dtype q8_0 --copy --copy-mib 1");
    INFO(c.err);
    REQUIRE(c.status == 0);
    const auto copy = nlohmann::json::parse(c.out.substr(0, c.out.find('\n')));
    CHECK(copy["impl"] == "copy");
    CHECK(copy["valid"] == true);
    CHECK(copy["gbps"].get<double>() > 0);
    CHECK(copy["transfer_gbps"].get<double>() > 0);
    CHECK(copy["ceiling_gbps"].get<double>() == std::max(copy["gbps"].get<double>(), copy["transfer_gbps"].get<double>()));
    CHECK_THAT(copy["variant"].get<std::string>(), Catch::StartsWith("copy.comp"));
    const auto point = nlohmann::json::parse(c.out.substr(c.out.find('\n') + 1));
    CHECK(point["kv_vs_copy"].get<double>() > 0);
    const Result bad = vk_attn("bench --seq 16 --dim 32 --kv-dtype f16 --kv-scale 2");
    CHECK(bad.status == 1);
    CHECK_THAT(bad.err, Catch::Contains("--kv-scale") && Catch::Contains("fp8"));
}

TEST_CASE("cli bench --plot: draws a PNG", "[cli]") {
    Workdir dir;
    const Result r = vk_attn("bench --seq 16,32 --dim 8 --repeat 1 --warmup 0 --plot " + dir / "g.png");
    INFO(r.err);
    REQUIRE(r.status == 0);
    std::ifstream png(dir / "g.png", std::ios::binary);
    char magic[4] = {};
    png.read(magic, 4);
    CHECK(std::string(magic + 1, 3) == "PNG");
}

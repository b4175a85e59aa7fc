// vk-attn's K/V storage types: float K/V quantized on the device, rows as stored, what the kernels
// read; bad storage named; quantized caches in decode and mha.
#include "cli/cli_support.hpp"

#include <tuple>

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::cli_test;

namespace {

// The values a file of rows of `dtype` stands for (head h's scale from `scales` for fp8), dense.
std::vector<float> dequantized(DType dtype, const std::vector<std::uint8_t>& bytes, std::int64_t rows, std::int64_t heads,
                               std::int64_t per_head, std::int64_t D, const std::vector<float>& scales = {}) {
    std::vector<float> out(static_cast<std::size_t>(rows * D));
    const std::uint64_t rb = row_bytes(dtype, D);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float scale = scales.empty() ? 1.0f : scales[static_cast<std::size_t>((r / per_head) % heads)];
        dequantize_row(dtype, {bytes.data() + r * rb, rb}, {out.data() + r * D, static_cast<std::size_t>(D)}, scale);
    }
    return out;
}

std::vector<double> reference_o(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                               std::array<std::int64_t, 4> q4, std::array<std::int64_t, 4> k4, std::array<std::int64_t, 4> v4) {
    std::vector<float> ref(static_cast<std::size_t>(q4[0] * q4[1] * q4[2] * v4[3]));
    reference_attention({.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, q4),
                         .k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, k4),
                         .v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, v4)},
                        {.o = make_view<void*>(ref.data(), DType::f32, Layout::bhnd, {q4[0], q4[1], q4[2], v4[3]})}, {});
    return {ref.begin(), ref.end()};
}

}  // namespace

TEST_CASE("cli run --kv-dtype: float K/V quantized on the device, uint8 rows as stored, --dequantized-k/-v what the kernels read", "[cli][storage_types]") {
    Workdir dir;
    std::mt19937 rng(1717);
    const std::vector<std::int64_t> qs{1, 4, 5, 64}, ks{1, 2, 37, 64}, vs{1, 2, 37, 32};
    const auto q = write_tensor(rng, dir / "q.npy", qs, false), k = write_tensor(rng, dir / "k.npy", ks, false),
               v = write_tensor(rng, dir / "v.npy", vs, false);
    const std::string qkv = "run --q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy";
    const std::string outs = " --out " + dir / "o.npy" + " --dequantized-k " + dir / "dk.npy" + " --dequantized-v " + dir / "dv.npy";

    // Floats quantized on the device: bit for bit the host's ggml blocks (each row quantized alone).
    auto host_blocks = [&](DType t, const std::vector<float>& x, std::int64_t D, const std::vector<float>& scales) {
        const std::int64_t rows = static_cast<std::int64_t>(x.size()) / D;
        std::vector<std::uint8_t> bytes(row_bytes(t, D) * static_cast<std::size_t>(rows));
        for (std::int64_t r = 0; r < rows; ++r)
            quantize_row(t, {x.data() + r * D, static_cast<std::size_t>(D)}, {bytes.data() + r * row_bytes(t, D), row_bytes(t, D)},
                         scales.empty() ? 1.0f : scales[static_cast<std::size_t>((r / 37) % 2)]);
        return bytes;
    };
    for (const auto& [t, scale_flag, scales] : {std::tuple{DType::q8_0, std::string(), std::vector<float>{}},
                                                std::tuple{DType::fp8_e4m3, std::string(" --kv-scales ") + dir / "s.npy",
                                                           std::vector<float>{0.5f, 2.0f}}}) {
        if (!scales.empty()) npy::write(dir / "s.npy", npy::ElementType::f32, {2}, scales.data());
        const Result r = vk_attn(qkv + " --kv-dtype " + to_string(t) + scale_flag + outs);
        INFO(to_string(t) << ": " << r.err);
        REQUIRE(r.status == 0);
        const std::vector<float> dk = floats(npy::read(dir / "dk.npy")), dv = floats(npy::read(dir / "dv.npy"));
        CHECK(npy::read(dir / "dk.npy").shape == ks);
        CHECK(dk == dequantized(t, host_blocks(t, k, 64, scales), 74, 2, 37, 64, scales));
        CHECK(dv == dequantized(t, host_blocks(t, v, 32, scales), 74, 2, 37, 32, scales));
        const Comparison c = compare(doubles(npy::read(dir / "o.npy")), reference_o(q, dk, dv, as4(qs), as4(ks), as4(vs)),
                                     tolerance_for(DType::f32));
        INFO(c.message);
        CHECK(c.ok);
    }

    // Already-quantized rows (uint8 [B, Hkv, Nkv, row bytes]) and a bf16 q (uint16 bit patterns).
    std::vector<std::uint8_t> k4 = host_blocks(DType::q4_1, k, 64, {}), v4 = host_blocks(DType::q4_1, v, 32, {});
    npy::write(dir / "k4.npy", npy::ElementType::u8, {1, 2, 37, 40}, k4.data());
    npy::write(dir / "v4.npy", npy::ElementType::u8, {1, 2, 37, 20}, v4.data());
    std::vector<std::uint16_t> qb(q.size());
    std::vector<float> qbf(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) qbf[i] = bf16_to_float(qb[i] = float_to_bf16(q[i]));
    npy::write(dir / "qb.npy", npy::ElementType::u16, qs, qb.data());
    const Result r = vk_attn("run --q " + dir / "qb.npy" + " --k " + dir / "k4.npy" + " --v " + dir / "v4.npy" +
                             " --kv-dtype q4_1" + outs);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains("texel-words"));
    const std::vector<float> dk = floats(npy::read(dir / "dk.npy")), dv = floats(npy::read(dir / "dv.npy"));
    CHECK(dk == dequantized(DType::q4_1, k4, 74, 2, 37, 64));
    CHECK(dv == dequantized(DType::q4_1, v4, 74, 2, 37, 32));
    const Comparison c = compare(doubles(npy::read(dir / "o.npy")), reference_o(qbf, dk, dv, as4(qs), as4(ks), as4(vs)),
                                 tolerance_for(DType::bf16));
    INFO(c.message);
    CHECK(c.ok);
}

TEST_CASE("cli run --kv-dtype: bad K/V storage exits 1 naming the flag, writing nothing", "[cli][storage_types]") {
    Workdir dir;
    std::mt19937 rng(1718);
    write_tensor(rng, dir / "q.npy", {1, 2, 3, 64}, false);
    write_tensor(rng, dir / "k.npy", {1, 1, 9, 64}, false);
    write_tensor(rng, dir / "v.npy", {1, 1, 9, 64}, false);
    write_tensor(rng, dir / "k40.npy", {1, 1, 9, 40}, false);
    const std::vector<std::uint8_t> rows(9 * 68, 0);
    npy::write(dir / "k8.npy", npy::ElementType::u8, {1, 1, 9, 68}, rows.data());
    npy::write(dir / "k7.npy", npy::ElementType::u8, {1, 1, 9, 67}, rows.data());
    const float three[] = {1, 2, 3};
    npy::write(dir / "s3.npy", npy::ElementType::f32, {3}, three);
    auto run = [&](const std::string& k, const std::string& v, const std::string& flags) {
        return vk_attn("run --q " + dir / "q.npy" + " --k " + dir / k + " --v " + dir / v + " " + flags + " --out " + dir / "o.npy");
    };
    const std::pair<Result, const char*> cases[] = {
        {run("k8.npy", "k8.npy", ""), "--k"},                                  // rows without --kv-dtype
        {run("k8.npy", "v.npy", "--kv-dtype q8_0"), "--v"},                    // rows and floats
        {run("k7.npy", "k7.npy", "--kv-dtype q8_0"), "--k"},                   // not whole blocks
        {run("k40.npy", "v.npy", "--kv-dtype q4_0"), "--kv-dtype"},            // D not a multiple of 32
        {run("k.npy", "v.npy", "--kv-dtype q8_0 --kv-scale 2"), "--kv-scale"},  // a scale for a block type
        {run("k.npy", "v.npy", "--kv-dtype fp8_e5m2 --kv-scales " + dir / "s3.npy"), "--kv-scales"},
        {run("k.npy", "v.npy", "--kv-dtype fp8_e5m2 --kv-scale -1"), "--kv-scale"},
        {run("k.npy", "v.npy", "--dtype q8_0"), "--dtype"}};
    for (const auto& [r, flag] : cases) {
        INFO(r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, Catch::Contains(flag));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o.npy"));
    }
}

TEST_CASE("cli decode and mha: bf16 and quantized caches, validated", "[cli][storage_types]") {
    for (const std::string flags : {"--dtype bf16 --kv-dtype q4_0", "--kv-dtype fp8_e5m2 --kv-scale 0.25 --paged --block-size 8",
                                    "--dtype bf16 --host-roundtrip"}) {
        const Result r = vk_attn("decode --heads 4 --kv-heads 2 --dim 64 --prompt 30,7 --batch 2 --steps 3 --validate --json " + flags);
        INFO(flags << ": " << r.err);
        REQUIRE(r.status == 0);
        const auto j = nlohmann::json::parse(r.out);
        CHECK(j["valid"] == true);
        CHECK(j["kv_dtype"] == (flags.find("q4_0") != std::string::npos ? "q4_0" : flags.find("fp8") != std::string::npos ? "fp8_e5m2" : "bf16"));
    }
    const Result dims = vk_attn("decode --dim 40 --kv-dtype q8_0 --prompt 4 --steps 1");
    CHECK(dims.status == 1);
    CHECK_THAT(dims.err, Catch::Contains("--dim"));
    // The multi-head layer in bf16 against PyTorch's fp32 output: inputs, weights and each projection
    // rounded to bf16's 8 bits (the layer against its bf16 CPU model: [mha]); a few parts in 1e3.
    const fs::path fixture = fs::path(VKATTN_FIXTURES) / "mha" / "data" / "cross_mask3d_bool_kpm_bool";
    const auto meta = nlohmann::json::parse(std::ifstream(fixture / "case.json"));
    Workdir out;
    const Result r = vk_attn("mha --query " + (fixture / "query.npy").string() + " --key " + (fixture / "key.npy").string() +
                             " --value " + (fixture / "value.npy").string() + " --weights " + (fixture / "weights").string() +
                             " --num-heads " + std::to_string(meta["num_heads"].get<int>()) + " --batch-first" +
                             " --key-padding-mask " + (fixture / "key_padding_mask.npy").string() + " --attn-mask " +
                             (fixture / "attn_mask.npy").string() + " --dtype bf16 --out " + out / "o.npy");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const Comparison c = compare(doubles(npy::read(out / "o.npy")), doubles(npy::read(fixture / "out.npy")), tolerance_for(DType::bf16));
    INFO(c.message);
    CHECK(c.relative_error < 1e-2);
}

// The storage types on the host (vkattn/quantize.hpp) against blocks ggml's own code wrote:
// tests/fixtures/ggml holds rows of floats (random, ties, one ulp off ties, zeros, huge values,
// subnormals) with ggml's quantize_row_<type>_ref and dequantize_row_<type> of each, compiled from
// ggml's unmodified ggml-quants.c (see its README). Every block must match byte for byte, every
// dequantized value bit for bit: this is what makes a llama.cpp cache readable as it is.
#include "support/catch.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "npy.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/quantize.hpp"

using namespace vkattn;

namespace {

const std::string kDir = std::string(VKATTN_FIXTURES) + "/ggml/";

npy::Array fixture(const std::string& name) { return npy::read(kDir + name + ".npy"); }

std::uint32_t bits(float x) {
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
}

// Bytes of a block's header (d, and m for the affine types).
std::size_t header_bytes(DType t) { return t == DType::q4_1 || t == DType::q5_1 ? 4 : 2; }

}  // namespace

TEST_CASE("quantize_row writes ggml's blocks byte for byte", "[quantize]") {
    const npy::Array rows = fixture("rows");
    REQUIRE(rows.shape == std::vector<std::int64_t>{40, 64});
    for (const DType type : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::iq4_nl}) {
        const npy::Array want = fixture(to_string(type));
        const std::size_t row = row_bytes(type, 64), block = block_bytes(type);
        REQUIRE(want.shape == std::vector<std::int64_t>{40, static_cast<std::int64_t>(row)});
        for (std::int64_t r = 0; r < 40; ++r) {
            const float* x = rows.as<float>() + r * 64;
            std::vector<std::uint8_t> got(row);
            quantize_row(type, {x, 64}, got);
            const auto* ggml = want.as<std::uint8_t>() + r * static_cast<std::int64_t>(row);
            for (std::size_t b = 0; b < 2; ++b) {
                // Where ggml's C is undefined its bytes are the compiler's accident, and only the scale
                // is defined: row 23's subnormal values (1/d overflows, then a float-to-int cast of
                // inf), and iq4_nl's blocks below 1e-15 (indices packed from an unwritten array).
                float amax = 0;
                for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
                const bool only_header = r == 23 || (type == DType::iq4_nl && amax < 1e-15f);
                const std::size_t n = only_header ? header_bytes(type) : block;
                INFO(to_string(type) << " row " << r << " block " << b);
                CHECK(std::memcmp(got.data() + b * block, ggml + b * block, n) == 0);
            }
        }
    }
}

TEST_CASE("dequantize_row gives ggml's values bit for bit", "[quantize]") {
    for (const DType type : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::iq4_nl}) {
        const npy::Array blocks = fixture(to_string(type));
        const npy::Array want = fixture(to_string(type) + "_dequantized");
        const std::size_t row = row_bytes(type, 64);
        for (std::int64_t r = 0; r < 40; ++r) {
            std::vector<float> got(64);
            dequantize_row(type, {blocks.as<std::uint8_t>() + r * static_cast<std::int64_t>(row), row}, got);
            for (std::int64_t j = 0; j < 64; ++j) {
                const float w = want.as<float>()[r * 64 + j];
                INFO(to_string(type) << " row " << r << " element " << j << ": " << got[j] << " vs ggml's " << w);
                // Row 29's fp16 scale overflows: 0·inf is NaN, whose sign bit is the platform's.
                if (std::isnan(w)) CHECK(std::isnan(got[j]));
                else CHECK(bits(got[j]) == bits(w));
                CHECK(bits(load_element(blocks.as<std::uint8_t>() + r * static_cast<std::int64_t>(row), type, j)) == bits(got[j]));
            }
        }
    }
}

TEST_CASE("float_to_bf16 rounds as ggml does, NaN kept quiet", "[quantize]") {
    const npy::Array rows = fixture("rows"), want = fixture("bf16");
    REQUIRE(want.type == npy::ElementType::u16);
    for (std::int64_t i = 0; i < rows.count(); ++i) CHECK(float_to_bf16(rows.as<float>()[i]) == want.as<std::uint16_t>()[i]);
    const npy::Array special_in = fixture("bf16_special_in"), special = fixture("bf16_special");
    for (std::int64_t i = 0; i < special_in.count(); ++i) {
        INFO("special value " << i);
        CHECK(float_to_bf16(special_in.as<float>()[i]) == special.as<std::uint16_t>()[i]);
    }
    for (std::uint32_t b = 0; b < 0x10000u; b += 7) {  // widening is exact: the bits come back
        const auto h = static_cast<std::uint16_t>(b);
        if (std::isnan(bf16_to_float(h))) continue;
        CHECK(float_to_bf16(bf16_to_float(h)) == h);
    }
}

TEST_CASE("quantize_row and dequantize_row refuse rows that are not whole blocks", "[quantize]") {
    std::vector<float> x(40, 1.0f);
    std::vector<std::uint8_t> out(68);
    CHECK_THROWS_WITH(quantize_row(DType::q8_0, x, out), Catch::StartsWith("dtype: ") && Catch::Contains("blocks of 32"));
    std::vector<float> x64(64, 1.0f);
    CHECK_THROWS_WITH(quantize_row(DType::q4_0, x64, out), Catch::StartsWith("out: ") && Catch::Contains("takes 36"));
    CHECK_THROWS_AS(quantize_row(DType::i32, x64, out), InvalidArgument);
    CHECK(row_bytes(DType::q5_1, 96) == 72);
    CHECK(row_bytes(DType::bf16, 5) == 10);
}

// fp8 against ml_dtypes' float8_e4m3fn / float8_e5m2 (tests/fixtures/fp8/generate.py): every byte's
// value, and the byte each of ~5,500 floats rounds to (every magnitude, subnormals, ties and one ulp
// either side of them, the saturating ends). ml_dtypes overflows to NaN / infinity where vLLM (and
// vkattn) saturate; the generator clips first, so those rows check the saturation.
TEST_CASE("fp8 e4m3 and e5m2 round and decode as ml_dtypes does, saturating as vLLM does", "[quantize]") {
    const std::string dir = std::string(VKATTN_FIXTURES) + "/fp8/";
    const npy::Array inputs = npy::read(dir + "inputs.npy");
    for (const auto& [type, name] : {std::pair{DType::fp8_e4m3, "e4m3"}, std::pair{DType::fp8_e5m2, "e5m2"}}) {
        const npy::Array values = npy::read(dir + name + "_values.npy"), want = npy::read(dir + name + ".npy");
        for (int b = 0; b < 256; ++b) {
            const float w = values.as<float>()[b], got = fp8_to_float(type, static_cast<std::uint8_t>(b));
            INFO(name << " byte " << b);
            if (std::isnan(w)) CHECK(std::isnan(got));
            else CHECK(bits(got) == bits(w));
        }
        REQUIRE(want.count() == inputs.count());
        for (std::int64_t i = 0; i < inputs.count(); ++i) {
            const float x = inputs.as<float>()[i];
            const std::uint8_t got = float_to_fp8(type, x), w = want.as<std::uint8_t>()[i];
            INFO(name << " input " << i << " = " << x);
            if (std::isnan(x)) CHECK(std::isnan(fp8_to_float(type, got)));
            else CHECK(int(got) == int(w));
        }
        CHECK(fp8_max(type) == (type == DType::fp8_e4m3 ? 448.0f : 57344.0f));
    }
}

TEST_CASE("fp8 rows are fp8(x / scale) and read back as fp8 · scale", "[quantize]") {
    const std::vector<float> x{1.0f, -3.0f, 0.1f, 2000.0f, -1e-6f, 0.0f};
    std::vector<std::uint8_t> q(x.size());
    std::vector<float> y(x.size());
    quantize_row(DType::fp8_e4m3, x, q, 2.5f);
    dequantize_row(DType::fp8_e4m3, q, y, 2.5f);
    for (std::size_t i = 0; i < x.size(); ++i) {
        INFO("element " << i);
        CHECK(q[i] == float_to_fp8(DType::fp8_e4m3, x[i] / 2.5f));
        CHECK(bits(y[i]) == bits(fp8_to_float(DType::fp8_e4m3, q[i]) * 2.5f));
    }
    CHECK(y[3] == 448.0f * 2.5f);  // 800 saturates to 448
    CHECK_THROWS_WITH(quantize_row(DType::fp8_e5m2, x, q, 0.0f), Catch::StartsWith("scale: ") && Catch::Contains("above 0"));
    std::vector<std::uint8_t> q8(row_bytes(DType::q8_0, 32));
    CHECK_THROWS_WITH(quantize_row(DType::q8_0, std::vector<float>(32, 1.0f), q8, 2.0f),
                      Catch::StartsWith("scale: ") && Catch::Contains("only fp8"));
    CHECK(row_bytes(DType::fp8_e5m2, 7) == 7);
}

// The reference's fp16 conversions: every bit pattern round-trips, rounding is to nearest even.
#include "support/catch.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "vkattn/tensor.hpp"

using namespace vkattn;

TEST_CASE("half: every bit pattern round-trips, NaNs stay NaN", "[reference][half]") {
    int failures = 0;
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
        const auto h = static_cast<std::uint16_t>(bits);
        const float f = half_to_float(h);
        const bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
        const std::uint16_t back = float_to_half(f);
        const bool ok = is_nan ? std::isnan(f) && (back & 0x7c00u) == 0x7c00u && (back & 0x3ffu) != 0 &&
                                     (back & 0x8000u) == (h & 0x8000u)
                               : back == h;
        if (!ok && ++failures <= 5) FAIL_CHECK("pattern " << bits << " -> " << f << " -> " << back);
    }
    CHECK(failures == 0);
    CHECK(half_to_float(0x3c00) == 1.0f);
    CHECK(half_to_float(0xc000) == -2.0f);
    CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
    CHECK(half_to_float(0x03ff) == std::ldexp(1023.0f, -24));
    CHECK(half_to_float(0x0400) == std::ldexp(1.0f, -14));
    CHECK(half_to_float(0x7bff) == 65504.0f);
    CHECK(half_to_float(0xfc00) == -INFINITY);
    CHECK(std::bit_cast<std::uint32_t>(half_to_float(0x8000)) == 0x80000000u);
}

TEST_CASE("half: float_to_half rounds to nearest even and overflows to infinity", "[reference][half]") {
    // Every midpoint between adjacent finite positive halves (exact in float) rounds to the even
    // neighbour; a hair either side rounds to the nearer one. Negative values mirror this.
    int failures = 0;
    for (std::uint16_t h = 0; h < 0x7bff; ++h) {
        const float lo = half_to_float(h), hi = half_to_float(static_cast<std::uint16_t>(h + 1));
        const float mid = (lo + hi) / 2;
        const std::uint16_t even = (h & 1u) ? static_cast<std::uint16_t>(h + 1) : h;
        const bool ok = float_to_half(mid) == even && float_to_half(-mid) == (even | 0x8000u) &&
                        float_to_half(std::nextafter(mid, 0.0f)) == h &&
                        float_to_half(std::nextafter(mid, INFINITY)) == h + 1;
        if (!ok && ++failures <= 5) FAIL_CHECK("between " << h << " and " << h + 1);
    }
    CHECK(failures == 0);
    CHECK(float_to_half(65504.0f) == 0x7bff);
    CHECK(float_to_half(65519.99f) == 0x7bff);
    CHECK(float_to_half(65520.0f) == 0x7c00);
    CHECK(float_to_half(-1e10f) == 0xfc00);
    CHECK(float_to_half(std::numeric_limits<float>::max()) == 0x7c00);
    CHECK(float_to_half(INFINITY) == 0x7c00);
    CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24: even is 0
    CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(float_to_half(std::ldexp(1.0f, -26)) == 0x0000);
    CHECK(float_to_half(-std::numeric_limits<float>::denorm_min()) == 0x8000);
    CHECK(float_to_half(std::ldexp(1023.5f, -24)) == 0x0400);  // subnormal rounds up to normal
    CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
    CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
    CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
    // A signalling NaN whose payload lies only in the low bits must not become infinity.
    CHECK(std::isnan(half_to_float(float_to_half(std::bit_cast<float>(0x7f800001u)))));
}

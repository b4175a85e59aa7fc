// The CPU reference's model features against naive() (support/naive_attention.hpp): sliding
// windows, ALiBi, softcap and sinks, Philox dropout, and Philox itself against Random123's vectors.
#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "vkattn/dropout.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/reference.hpp"
#include "support/naive_attention.hpp"

using namespace vkattn;
using namespace vkattn::test;

TEST_CASE("reference: sliding window around an explicit causal offset", "[reference][features]") {
    std::mt19937 rng(2001);
    const auto q = random_tensor(rng, {2, 2, 6, 4}), k = random_tensor(rng, {2, 2, 9, 4}),
               v = random_tensor(rng, {2, 2, 9, 3});
    const std::int64_t offset = 2, left = 3, right = 1;  // causal cuts the right side to 0
    const AttentionOptions options{.causal_offset = offset, .window = {left, right}};
    const Result r = run(q, k, v, {}, options);
    const Expected e = naive(q, k, v, 0.5, [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
        return j <= i + offset && j >= i + offset - left;
    });
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
    CHECK(mismatch(r.lse, e.lse) == "");
}

TEST_CASE("reference: a window without causal and one that empties rows", "[reference][features]") {
    std::mt19937 rng(2002);
    const auto q = random_tensor(rng, {1, 1, 7, 4}), k = random_tensor(rng, {1, 1, 7, 4}),
               v = random_tensor(rng, {1, 1, 7, 3});
    SECTION("symmetric window (2, 2), top-left") {
        const Result r = run(q, k, v, {}, {.window = {2, 2}});
        const Expected e = naive(q, k, v, 0.5, [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
            return j >= i - 2 && j <= i + 2;
        });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
    }
    SECTION("offset -3: the first three rows see nothing and give zeros") {
        const Result r = run(q, k, v, {}, {.causal_offset = -3});
        const Expected e = naive(q, k, v, 0.5, [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
            return j <= i - 3;
        });
        CHECK(mismatch(r.o, e.o) == "");
        CHECK(mismatch(r.lse, e.lse) == "");
        CHECK(r.lse[0] == -kInf);
        CHECK(r.o[0] == 0.0f);
        CHECK_FALSE(any_nan(r.o));
    }
}

TEST_CASE("reference: ALiBi slopes from max_bias are the geometric sequence", "[reference][features]") {
    // Hq = 4 (a power of two): slope_h = 2^(-8 (h + 1) / 4).
    const std::vector<float> four = alibi_slopes(4, 8.0);
    REQUIRE(four.size() == 4);
    CHECK(four[0] == 0.25f);
    CHECK(four[3] == 1.0f / 256.0f);
    // Hq = 12: n2 = 8, m0 = 2^-1, m1 = 2^-0.5; heads 8.. take the odd powers of m1.
    const std::vector<float> twelve = alibi_slopes(12, 8.0);
    CHECK(twelve[7] == 1.0f / 256.0f);
    CHECK(twelve[8] == Approx(std::exp2(-0.5)));
    CHECK(twelve[9] == Approx(std::exp2(-1.5)));
    CHECK(twelve[11] == Approx(std::exp2(-3.5)));

    std::mt19937 rng(2003);
    const auto q = random_tensor(rng, {1, 4, 5, 4}), k = random_tensor(rng, {1, 4, 8, 4}),
               v = random_tensor(rng, {1, 4, 8, 3});
    const Result r = run(q, k, v, {}, {.causal = Causal::bottom_right, .alibi_max_bias = 8.0});
    const std::int64_t a = 8 - 5;  // bottom-right alignment
    const Expected e = naive(
        q, k, v, 0.5, [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return j <= i + a; },
        [&](std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
            return -std::exp2(-2.0 * static_cast<double>(h + 1)) * static_cast<double>(std::abs(i + a - j));
        });
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
}

TEST_CASE("reference: softcap applies before the masks and sinks join only the denominator",
          "[reference][features]") {
    std::mt19937 rng(2004);
    const auto q = random_tensor(rng, {1, 2, 4, 4}, -4.0f, 4.0f), k = random_tensor(rng, {1, 2, 6, 4}, -4.0f, 4.0f),
               v = random_tensor(rng, {1, 2, 6, 3});
    const std::vector<float> sinks{1.5f, -0.5f};
    std::vector<float> bias(24);
    for (std::size_t x = 0; x < bias.size(); ++x) bias[x] = x % 5 == 0 ? -std::numeric_limits<float>::infinity() : 0.1f * static_cast<float>(x % 7);
    AttentionInputs extra;
    extra.sinks = sinks;
    extra.float_mask = MaskView{bias.data(), {4, 6}};
    const Result r = run(q, k, v, extra, {.causal = Causal::top_left, .softcap = 1.5});
    const Expected e = naive(
        q, k, v, 0.5, [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return j <= i; },
        [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return double(bias[static_cast<std::size_t>(i * 6 + j)]); },
        1.5, {1.5, -0.5});
    CHECK(mismatch(r.o, e.o) == "");
    CHECK(mismatch(r.weights, e.weights) == "");
    CHECK(mismatch(r.lse, e.lse) == "");
    // Row 0 of each head: its only causal key (j = 0) has bias -inf, so the sink is all there is.
    CHECK(r.lse[0] == Approx(1.5));
    CHECK(r.lse[4] == Approx(-0.5));
    CHECK(r.o[0] == 0.0f);
}

TEST_CASE("reference: dropout zeroes exactly the Philox-chosen weights and rescales the rest",
          "[reference][features][dropout]") {
    std::mt19937 rng(2005);
    const auto q = random_tensor(rng, {2, 2, 5, 4}), k = random_tensor(rng, {2, 2, 11, 4}),
               v = random_tensor(rng, {2, 2, 11, 3});
    const Result plain = run(q, k, v);
    const double p = 0.4;
    const std::uint64_t seed = 99;
    const Result dropped = run(q, k, v, {}, {.dropout = p, .seed = seed});
    const std::uint32_t threshold = dropout_threshold(p);
    std::size_t x = 0;
    for (std::uint32_t b = 0; b < 2; ++b)
        for (std::uint32_t h = 0; h < 2; ++h)
            for (std::uint32_t i = 0; i < 5; ++i)
                for (std::uint32_t j = 0; j < 11; ++j, ++x) {
                    const double want = dropout_keeps(seed, threshold, b, h, i, j) ? plain.weights[x] / (1.0 - p) : 0.0;
                    CHECK(dropped.weights[x] == Approx(want).epsilon(1e-6));
                }
    CHECK(mismatch(dropped.lse, plain.lse) == "");
}

TEST_CASE("Philox 4x32-10 matches the Random123 known-answer vectors", "[reference][dropout]") {
    CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == PhiloxBlock{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
    CHECK(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}) == PhiloxBlock{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
    CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
          PhiloxBlock{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
    CHECK(dropout_threshold(0.0) == 0u);
    CHECK(dropout_threshold(0.5) == 0x80000000u);
    CHECK(dropout_threshold(0.9999999999999) == 0xFFFFFFFFu);
}

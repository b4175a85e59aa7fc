// detail::resolve(): masks and their broadcasting, the scale, the outputs, the model features and
// the key ranges they make, flops, and the enums' names (support/problem_setup.hpp's problem).
#include "support/catch.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attention/problem.hpp"
#include "support/problem_setup.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::test;

TEST_CASE("resolve rejects masks that do not broadcast", "[problem]") {
    Setup s;
    SECTION("trailing dimension") {
        s.set_bool_mask({Setup::Nq, Setup::Nkv + 1});
        CHECK(s.rejected() == "bool_mask");
    }
    SECTION("transposed") {
        s.set_float_mask({Setup::Nkv, Setup::Nq});
        CHECK(s.rejected() == "float_mask");
    }
    SECTION("wrong batch") {
        s.set_bool_mask({3, 1, 1, Setup::Nkv});
        CHECK(s.rejected() == "bool_mask");
    }
    SECTION("kv heads instead of query heads") {
        s.set_float_mask({1, Setup::Hkv, 1, 1});
        CHECK(s.rejected() == "float_mask");
    }
    SECTION("rank above 4") {
        s.set_bool_mask({1, Setup::B, Setup::Hq, Setup::Nq, Setup::Nkv});
        CHECK(s.rejected() == "bool_mask");
        s.in.bool_mask.reset();
        s.set_float_mask({1, 1, 1, 1, 1});
        CHECK(s.rejected() == "float_mask");
    }
    SECTION("zero-sized dimension") {
        s.set_bool_mask({0, Setup::Nkv});
        CHECK(s.rejected() == "bool_mask");
    }
    SECTION("no data") {
        s.in.float_mask = MaskView{nullptr, {Setup::Nkv}};
        CHECK(s.rejected() == "float_mask");
    }
}

TEST_CASE("resolve computes broadcasting strides", "[problem]") {
    constexpr auto B = Setup::B, Hq = Setup::Hq, Nq = Setup::Nq, Nkv = Setup::Nkv;
    struct Case {
        std::vector<std::int64_t> shape;
        Shape strides;
        std::int64_t elements;
    };
    const std::vector<Case> cases = {
        {{}, {0, 0, 0, 0}, 1},
        {{Nkv}, {0, 0, 0, 1}, Nkv},
        {{1}, {0, 0, 0, 0}, 1},
        {{Nq, Nkv}, {0, 0, Nkv, 1}, Nq * Nkv},
        {{Nq, 1}, {0, 0, 1, 0}, Nq},
        {{1, 1, Nq, Nkv}, {0, 0, Nkv, 1}, Nq * Nkv},
        {{B, 1, 1, Nkv}, {Nkv, 0, 0, 1}, B * Nkv},
        {{1, Hq, 1, 1}, {0, 1, 0, 0}, Hq},
        {{Hq, Nq, 1}, {0, Nq, 1, 0}, Hq * Nq},
        {{B, Hq, Nq, Nkv}, {Hq * Nq * Nkv, Nq * Nkv, Nkv, 1}, B * Hq * Nq * Nkv},
    };
    for (const auto& c : cases) {
        Setup s;
        s.set_bool_mask(c.shape);
        s.set_float_mask(c.shape);
        INFO("mask rank " << c.shape.size());
        const auto p = s.resolve();
        CHECK(p.bool_mask.data == s.bool_data.data());
        CHECK(p.float_mask.data == s.float_data.data());
        CHECK(p.bool_mask.strides == c.strides);
        CHECK(p.float_mask.strides == c.strides);
        CHECK(p.bool_mask.elements == c.elements);
        // The last element of [B, Hq, Nq, Nkv] maps to the mask's last element.
        CHECK(p.bool_mask.offset(B - 1, Hq - 1, Nq - 1, Nkv - 1) == c.elements - 1);
    }
}

TEST_CASE("resolve resolves the scale", "[problem]") {
    Setup s;
    SECTION("default 1/sqrt(Dk)") {
        CHECK(s.resolve().scale == Approx(1.0 / std::sqrt(8.0)).epsilon(1e-15));
    }
    SECTION("explicit values pass through") {
        for (double scale : {0.125, -2.0, 0.0, 1e6}) {
            s.opt.scale = scale;
            CHECK(s.resolve().scale == scale);
        }
    }
    SECTION("non-finite values are rejected") {
        for (double scale : {std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity()}) {
            s.opt.scale = scale;
            CHECK(s.rejected() == "scale");
        }
    }
}

TEST_CASE("resolve records the requested outputs and the causal alignment", "[problem]") {
    Setup s;
    float weights = 0, lse = 0;
    s.out.weights = &weights;
    s.out.lse = &lse;
    s.opt.causal = Causal::bottom_right;
    s.set_lengths({4, 2});
    const auto p = s.resolve();
    CHECK(p.want_weights);
    CHECK(p.want_lse);
    CHECK(p.alignment(0) == 4 - Setup::Nq);
    CHECK(p.alignment(1) == 2 - Setup::Nq);
    s.opt.causal = Causal::top_left;
    CHECK(s.resolve().alignment(0) == 0);
}

TEST_CASE("Problem::flops counts 2*(Dk+Dv) per visible query-key pair", "[problem]") {
    Setup s;  // Nq = 3, Nkv = 5
    const double heads = 2.0 * 4;  // B·Hq
    CHECK(s.resolve().flops() == 2.0 * heads * 15 * (8 + 6));
    s.opt.causal = Causal::top_left;  // rows see 1, 2, 3 keys
    CHECK(s.resolve().flops() == 2.0 * heads * 6 * (8 + 6));
    s.opt.causal = Causal::bottom_right;  // a = 2: rows see 3, 4, 5
    CHECK(s.resolve().flops() == 2.0 * heads * 12 * (8 + 6));
    s.opt.window = {1, -1};  // and at most 2 of them
    CHECK(s.resolve().flops() == 2.0 * heads * 6 * (8 + 6));
}

TEST_CASE("Problem::key_range combines key lengths / causal offset and window", "[problem][features]") {
    Setup s;  // Nq = 3, Nkv = 5
    s.set_lengths({4, 2});
    s.opt.causal_offset = 1;
    s.opt.window = {1, 0};
    const auto p = s.resolve();
    CHECK(p.causal == Causal::top_left);
    CHECK(p.alignment(0) == 1);
    auto range = [&](std::int64_t b, std::int64_t i) { const auto r = p.key_range(b, i); return std::pair{r.first, r.limit}; };
    CHECK(range(0, 0) == std::pair<std::int64_t, std::int64_t>{0, 2});  // keys 0..1
    CHECK(range(0, 2) == std::pair<std::int64_t, std::int64_t>{2, 4});  // keys 2..3 (length 4)
    CHECK(range(1, 2) == std::pair<std::int64_t, std::int64_t>{2, 2});  // length 2: empty
    CHECK_FALSE(p.key_visible(1, 0, 2, 2));
    CHECK(p.key_visible(0, 3, 2, 3));
}

TEST_CASE("resolve validates the model features, naming the option", "[problem][features]") {
    Setup s;
    CHECK(s.rejected() == "<accepted>");
    SECTION("causal offset with bottom-right") {
        s.opt.causal = Causal::bottom_right;
        s.opt.causal_offset = 2;
        CHECK(s.rejected() == "causal_offset");
    }
    SECTION("causal offset beyond 2^30 either way / down to -2^63") {
        s.opt.causal_offset = (std::int64_t{1} << 30) + 1;
        CHECK(s.rejected() == "causal_offset");
        s.opt.causal_offset = -(std::int64_t{1} << 30) - 1;
        CHECK(s.rejected() == "causal_offset");
        s.opt.causal_offset = std::numeric_limits<std::int64_t>::min();
        CHECK(s.rejected() == "causal_offset");
    }
    SECTION("window sides") {
        s.opt.window = {-2, 3};
        CHECK(s.rejected() == "window");
        s.opt.window = {0, std::int64_t{1} << 31};
        CHECK(s.rejected() == "window");
        s.opt.window = {0, 0};
        CHECK(s.rejected() == "<accepted>");
    }
    SECTION("softcap") {
        for (double c : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
            s.opt.softcap = c;
            CHECK(s.rejected() == "softcap");
        }
    }
    SECTION("ALiBi") {
        s.opt.alibi_max_bias = 0.0;
        CHECK(s.rejected() == "alibi_max_bias");
        s.opt.alibi_max_bias = 8.0;
        CHECK(s.resolve().alibi.size() == 4);
        const std::vector<float> three{1, 2, 3}, four{1, 2, 3, 4};
        s.in.alibi_slopes = four;
        CHECK(s.rejected() == "alibi_slopes");  // both given
        s.opt.alibi_max_bias.reset();
        CHECK(s.rejected() == "<accepted>");
        s.in.alibi_slopes = three;
        CHECK(s.rejected() == "alibi_slopes");
        const std::vector<float> nan{1, std::nanf(""), 3, 4};
        s.in.alibi_slopes = nan;
        CHECK(s.rejected() == "alibi_slopes");
    }
    SECTION("sinks") {
        const std::vector<float> ok{0, -std::numeric_limits<float>::infinity(), 2, 3};
        s.in.sinks = ok;
        CHECK(s.rejected() == "<accepted>");
        const std::vector<float> plus_inf{0, std::numeric_limits<float>::infinity(), 2, 3}, few{1};
        s.in.sinks = plus_inf;
        CHECK(s.rejected() == "sinks");
        s.in.sinks = few;
        CHECK(s.rejected() == "sinks");
    }
    SECTION("dropout") {
        for (double p : {-0.1, 1.0, std::nan("")}) {
            s.opt.dropout = p;
            CHECK(s.rejected() == "dropout");
        }
        s.opt.dropout = 0.25;
        CHECK(s.resolve().drop_threshold == 0x40000000u);
    }
}

TEST_CASE("to_string names the enums", "[problem]") {
    CHECK(to_string(DType::f32) == "f32");
    CHECK(to_string(DType::f16) == "f16");
    CHECK(size_of(DType::f32) == 4);
    CHECK(size_of(DType::f16) == 2);
    CHECK(to_string(Layout::bhnd) == "bhnd");
    CHECK(to_string(Layout::bnhd) == "bnhd");
    CHECK(to_string(Causal::none) == "none");
    CHECK(to_string(Causal::top_left) == "top-left");
    CHECK(to_string(Causal::bottom_right) == "bottom-right");
    CHECK(to_string(Impl::automatic) == "auto");
    CHECK(to_string(Impl::unfused) == "unfused");
    CHECK(to_string(Impl::fused) == "fused");
    CHECK(to_string(Impl::split) == "split");
}

TEST_CASE("dense_strides for both layouts", "[problem]") {
    const Shape shape{2, 3, 5, 7};
    CHECK(dense_strides(Layout::bhnd, shape) == Shape{105, 35, 7, 1});
    CHECK(dense_strides(Layout::bnhd, shape) == Shape{105, 7, 21, 1});
    // bnhd: element (b, h, n, d) sits at ((b·N + n)·H + h)·D + d.
    const auto view = make_view<const void*>(nullptr, DType::f32, Layout::bnhd, shape);
    CHECK(view.offset(1, 2, 4, 6) == ((1 * 5 + 4) * 3 + 2) * 7 + 6);
    CHECK(view.span() == 2 * 3 * 5 * 7);
}

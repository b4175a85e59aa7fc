// detail::resolve(): the views, shapes, sizes and key lengths it accepts and those it refuses by name
// (support/problem_setup.hpp's problem).
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

TEST_CASE("resolve accepts a valid grouped-query problem and resolves it", "[problem]") {
    Setup s;
    const auto p = s.resolve();
    CHECK(p.B == 2);
    CHECK(p.Hq == 4);
    CHECK(p.Hkv == 2);
    CHECK(p.Nq == 3);
    CHECK(p.Nkv == 5);
    CHECK(p.Dk == 8);
    CHECK(p.Dv == 6);
    CHECK(p.group == 2);
    CHECK(p.kv_head(0) == 0);
    CHECK(p.kv_head(1) == 0);
    CHECK(p.kv_head(2) == 1);
    CHECK(p.kv_head(3) == 1);
    CHECK(p.dtype == DType::f32);
    CHECK(p.causal == Causal::none);
    CHECK_FALSE(p.has_kv_lengths);
    CHECK(p.kv_len == std::vector<std::int32_t>{5, 5});
    CHECK_FALSE(p.bool_mask.present());
    CHECK_FALSE(p.float_mask.present());
    CHECK_FALSE(p.want_weights);
    CHECK_FALSE(p.want_lse);
}

TEST_CASE("resolve accepts the interleaved layout and fp16", "[problem]") {
    Setup s;
    s.in.q.strides = dense_strides(Layout::bnhd, s.in.q.shape);
    s.in.k.strides = dense_strides(Layout::bnhd, s.in.k.shape);
    s.out.o.strides = dense_strides(Layout::bnhd, s.out.o.shape);
    CHECK(s.rejected() == "<accepted>");
    s.in.q.dtype = s.in.k.dtype = s.in.v.dtype = s.out.o.dtype = DType::f16;
    CHECK(s.resolve().dtype == DType::f16);
}

TEST_CASE("resolve rejects bad q, k, v and o views, naming the tensor", "[problem]") {
    Setup s;
    SECTION("missing data") {
        s.in.q.data = nullptr;
        CHECK(s.rejected() == "q");
    }
    SECTION("missing output data") {
        s.out.o.data = nullptr;
        CHECK(s.rejected() == "o");
    }
    SECTION("an empty dimension") {
        s.in.k.shape[2] = 0;
        s.in.v.shape[2] = 0;
        CHECK(s.rejected() == "k");
    }
    SECTION("a negative stride") {
        s.in.v.strides[1] = -1;
        CHECK(s.rejected() == "v");
    }
    SECTION("non-contiguous feature dimension") {
        for (const char* name : {"q", "k", "v", "o"}) {
            Setup t;
            if (name == std::string("q")) t.in.q.strides[3] = 2;
            if (name == std::string("k")) t.in.k.strides[3] = 2;
            if (name == std::string("v")) t.in.v.strides[3] = 0;
            if (name == std::string("o")) t.out.o.strides[3] = 2;
            CHECK(t.rejected() == name);
        }
    }
    SECTION("dtypes: k and v have their own, o has q's") {
        s.in.k.dtype = DType::f16;
        s.in.v.dtype = DType::bf16;
        CHECK(s.rejected() == "<accepted>");
        s.out.o.dtype = DType::f16;
        CHECK(s.rejected() == "o");
        s.in.q.dtype = DType::f16;  // now o agrees with q
        CHECK(s.rejected() == "<accepted>");
        s.in.k.dtype = DType::i32;
        CHECK(s.rejected() == "k");
        s.in.k.dtype = DType::f32;
        s.in.q.dtype = s.out.o.dtype = DType::q8_0;  // a block type is for k and v only
        CHECK(s.rejected() == "q");
    }
}

TEST_CASE("resolve rejects an output whose elements would share memory", "[problem]") {
    Setup s;  // o is [2, 4, 3, 6]: dense strides [72, 18, 6, 1]
    SECTION("stride 0 on a dimension larger than 1") {
        for (std::size_t d = 0; d < 3; ++d) {
            Setup t;
            t.out.o.strides[d] = 0;
            CHECK(t.rejected() == "o");
        }
    }
    SECTION("rows that overlap") {
        s.out.o.strides = {72, 18, 3, 1};  // row stride 3 < Dv = 6
        CHECK(s.rejected() == "o");
    }
    SECTION("two dimensions with the same stride") {
        s.out.o.strides = {18, 18, 6, 1};
        CHECK(s.rejected() == "o");
    }
    SECTION("heads that land inside another batch's heads") {
        s.out.o.strides = {36, 18, 6, 1};  // batch 1 starts at head 2 of batch 0
        CHECK(s.rejected() == "o");
    }
    SECTION("dense, interleaved and padded outputs are accepted") {
        CHECK(s.rejected() == "<accepted>");
        s.out.o.strides = dense_strides(Layout::bnhd, s.out.o.shape);
        CHECK(s.rejected() == "<accepted>");
        s.out.o.strides = {400, 8, 40, 1};  // bnhd with rows padded to 8 and gaps between batches
        CHECK(s.rejected() == "<accepted>");
    }
    SECTION("a dimension of extent 1 may have any stride") {
        s.in.q.shape[0] = s.in.k.shape[0] = s.in.v.shape[0] = s.out.o.shape[0] = 1;
        s.out.o.strides[0] = 0;
        CHECK(s.rejected() == "<accepted>");
        s.out.o.strides[0] = 5;
        CHECK(s.rejected() == "<accepted>");
    }
    SECTION("inputs may alias: a stride of 0 broadcasts one query head") {
        s.in.q.strides[1] = 0;
        s.in.k.strides[2] = 0;
        CHECK(s.rejected() == "<accepted>");
    }
}

TEST_CASE("resolve rejects views whose span overflows 64 bits, naming the tensor", "[problem]") {
    constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
    Setup s;
    SECTION("one stride times its extent overflows") {
        s.in.k.strides[2] = max / 2;  // (Nkv - 1) · stride with Nkv = 5
        CHECK(s.rejected() == "k");
    }
    SECTION("each term fits but their sum overflows") {
        s.in.q.strides[0] = max - 10;
        s.in.q.strides[1] = max / 4;
        CHECK(s.rejected() == "q");
    }
    SECTION("the element offsets fit but the byte offsets do not") {
        s.in.v.strides[0] = max / 4;  // f32: the last byte is past 2^63 - 1
        CHECK(s.rejected() == "v");
    }
    SECTION("a feature dimension of 2^63 - 1 elements") {
        s.out.o.shape[3] = max;
        CHECK(s.rejected() == "o");
    }
}

TEST_CASE("resolve rejects sizes the GPU indexes with 32-bit integers above 2^31 - 1",
          "[problem]") {
    constexpr std::int64_t big = std::int64_t{1} << 31;  // 2^31: one past the limit
    // resolve() never reads the data, so dense views of huge shapes over a small buffer are fine.
    auto reshape = [](auto& view, Shape shape) {
        view.shape = shape;
        view.strides = dense_strides(Layout::bhnd, shape);
    };
    constexpr auto B = Setup::B, Hq = Setup::Hq, Hkv = Setup::Hkv, Nq = Setup::Nq,
                   Nkv = Setup::Nkv, Dk = Setup::Dk, Dv = Setup::Dv;
    Setup s;
    SECTION("Nq") {
        reshape(s.in.q, {B, Hq, big, Dk});
        reshape(s.out.o, {B, Hq, big, Dv});
        CHECK(s.rejected() == "q");
    }
    SECTION("Nkv, with or without key lengths") {
        reshape(s.in.k, {B, Hkv, big, Dk});
        reshape(s.in.v, {B, Hkv, big, Dv});
        CHECK(s.rejected() == "k");
        s.set_lengths({5, 5});
        CHECK(s.rejected() == "k");
    }
    SECTION("Nkv = 2^31 - 1 is accepted") {
        reshape(s.in.k, {B, Hkv, big - 1, Dk});
        reshape(s.in.v, {B, Hkv, big - 1, Dv});
        CHECK(s.resolve().kv_len == std::vector<std::int32_t>{std::int32_t(big - 1),
                                                              std::int32_t(big - 1)});
    }
    SECTION("Dk") {
        reshape(s.in.q, {B, Hq, Nq, big});
        reshape(s.in.k, {B, Hkv, Nkv, big});
        CHECK(s.rejected() == "q");
    }
    SECTION("Dv") {
        reshape(s.in.v, {B, Hkv, Nkv, big});
        reshape(s.out.o, {B, Hq, Nq, big});
        CHECK(s.rejected() == "v");
    }
    SECTION("B·Hq units") {
        constexpr std::int64_t batch = 1 << 16, heads = 1 << 15;  // B·Hq = 2^31
        reshape(s.in.q, {batch, heads, Nq, Dk});
        reshape(s.in.k, {batch, Hkv, Nkv, Dk});
        reshape(s.in.v, {batch, Hkv, Nkv, Dv});
        reshape(s.out.o, {batch, heads, Nq, Dv});
        CHECK(s.rejected() == "q");
        reshape(s.in.q, {batch, heads / 2, Nq, Dk});  // B·Hq = 2^30
        reshape(s.out.o, {batch, heads / 2, Nq, Dv});
        CHECK(s.rejected() == "<accepted>");
    }
    SECTION("the message names the limit") {
        reshape(s.in.q, {B, Hq, big, Dk});
        reshape(s.out.o, {B, Hq, big, Dv});
        CHECK_THROWS_WITH(s.resolve(), Catch::Contains("2^31 - 1") && Catch::Contains("Nq"));
    }
}

TEST_CASE("resolve rejects mismatched shapes", "[problem]") {
    Setup s;
    SECTION("k batch") { s.in.k.shape[0] = 3; CHECK(s.rejected() == "k"); }
    SECTION("v batch") { s.in.v.shape[0] = 1; CHECK(s.rejected() == "v"); }
    SECTION("k head dimension") { s.in.k.shape[3] = 7; CHECK(s.rejected() == "k"); }
    SECTION("v heads") { s.in.v.shape[1] = 1; CHECK(s.rejected() == "v"); }
    SECTION("v sequence length") { s.in.v.shape[2] = 4; CHECK(s.rejected() == "v"); }
    SECTION("Hq not a multiple of Hkv") {
        s.in.k.shape[1] = s.in.v.shape[1] = 3;
        CHECK(s.rejected() == "k");
    }
    SECTION("Hkv larger than Hq") {
        s.in.k.shape[1] = s.in.v.shape[1] = 8;
        CHECK(s.rejected() == "k");
    }
    SECTION("o shape") {
        for (int d = 0; d < 4; ++d) {
            Setup t;
            t.out.o.shape[static_cast<std::size_t>(d)] += 1;
            CHECK(t.rejected() == "o");
        }
        s.out.o.shape[3] = Setup::Dk;  // Dk instead of Dv
        CHECK(s.rejected() == "o");
    }
}

TEST_CASE("resolve validates kv_lengths", "[problem]") {
    Setup s;
    SECTION("too few") { s.set_lengths({5}); CHECK(s.rejected() == "kv_lengths"); }
    SECTION("too many") { s.set_lengths({5, 5, 5}); CHECK(s.rejected() == "kv_lengths"); }
    SECTION("negative") { s.set_lengths({-1, 5}); CHECK(s.rejected() == "kv_lengths"); }
    SECTION("above Nkv") { s.set_lengths({5, 6}); CHECK(s.rejected() == "kv_lengths"); }
    SECTION("the bounds 0 and Nkv are valid") {
        s.set_lengths({0, 5});
        const auto p = s.resolve();
        CHECK(p.has_kv_lengths);
        CHECK(p.kv_len == std::vector<std::int32_t>{0, 5});
        CHECK_FALSE(p.key_visible(0, 0, 0, 0));
        CHECK(p.key_visible(1, 0, 0, 4));
    }
}

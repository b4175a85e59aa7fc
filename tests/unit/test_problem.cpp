// detail::resolve(): argument validation, broadcasting and defaults. resolve() never reads tensor
// data, so the buffers here only have to exist and be large enough for the views.
#include "support/catch.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attention/problem.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using Shape = std::array<std::int64_t, 4>;

namespace {

// A valid grouped-query problem: B=2, Hq=4, Hkv=2, Nq=3, Nkv=5, Dk=8, Dv=6.
struct Setup {
    static constexpr std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 3, Nkv = 5, Dk = 8, Dv = 6;
    std::vector<float> q = std::vector<float>(4096), k = q, v = q, o = q;
    std::vector<std::uint8_t> bool_data = std::vector<std::uint8_t>(4096, 1);
    std::vector<float> float_data = std::vector<float>(4096);
    std::vector<std::int32_t> lengths;
    AttentionInputs in;
    AttentionOutputs out;
    AttentionOptions opt;

    Setup() {
        in.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, Dk});
        in.k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, {B, Hkv, Nkv, Dk});
        in.v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, {B, Hkv, Nkv, Dv});
        out.o = make_view<void*>(o.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, Dv});
    }
    Setup(const Setup&) = delete;
    Setup& operator=(const Setup&) = delete;

    void set_lengths(std::vector<std::int32_t> l) {
        lengths = std::move(l);
        in.kv_lengths = lengths;
    }
    void set_bool_mask(std::vector<std::int64_t> shape) {
        in.bool_mask = MaskView{bool_data.data(), std::move(shape)};
    }
    void set_float_mask(std::vector<std::int64_t> shape) {
        in.float_mask = MaskView{float_data.data(), std::move(shape)};
    }
    detail::Problem resolve() const { return detail::resolve(in, out, opt); }

    // The argument named by the InvalidArgument resolve() throws, or "<accepted>".
    std::string rejected() const {
        try {
            (void)resolve();
        } catch (const InvalidArgument& e) {
            CHECK(std::string(e.what()).rfind(e.argument() + ": ", 0) == 0);
            return e.argument();
        }
        return "<accepted>";
    }
};

}  // namespace

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

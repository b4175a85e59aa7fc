// vk-attn run end to end: every accepted rank and dtype round-trips through .npy files and agrees with
// the library's reference, Fortran-order and big-endian files read as NumPy writes them, the model
// features reach the library, and every bad input exits 1 with one line naming the file or flag,
// leaving no output behind.
#include "cli/cli_support.hpp"

#include <cstring>
#include <limits>
#include <optional>

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::cli_test;

namespace {

// Writes `values` (C order, `shape`) as a .npy file of float32 that np.save would write for a
// transposed array (`fortran`: the data in Fortran order, axis 0 fastest) or for `astype('>f4')`
// (`big_endian`), byte by byte, since npy::write only writes C order, little-endian.
void write_f32_as_numpy(const std::string& path, const std::vector<float>& values, const std::vector<std::int64_t>& shape,
                        bool fortran, bool big_endian) {
    std::vector<float> stored(values.size());
    std::vector<std::int64_t> index(shape.size());
    for (std::size_t c = 0; c < values.size(); ++c) {
        std::int64_t rest = static_cast<std::int64_t>(c), offset = 0, stride = 1;
        for (std::size_t k = shape.size(); k-- > 0;) {
            index[k] = rest % shape[k];
            rest /= shape[k];
        }
        for (std::size_t k = 0; k < shape.size(); ++k) {
            offset += index[k] * stride;
            stride *= shape[k];
        }
        stored[fortran ? static_cast<std::size_t>(offset) : c] = values[c];
    }
    std::string header = std::string("{'descr': '") + (big_endian ? ">f4" : "<f4") +
                         "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (";
    for (auto d : shape) header += std::to_string(d) + ", ";
    header += "), }";
    header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    const char preamble[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(header.size() & 0xff),
                             static_cast<char>(header.size() >> 8)};
    out.write(preamble, sizeof(preamble));
    out << header;
    for (const float x : stored) {
        char bytes[4];
        std::memcpy(bytes, &x, 4);
        if (big_endian) std::reverse(bytes, bytes + 4);
        out.write(bytes, 4);
    }
}

}  // namespace

TEST_CASE("cli run: every rank and dtype round-trips and matches the reference", "[cli]") {
    const int rank = GENERATE(2, 3, 4);
    const bool f16 = GENERATE(false, true);
    Workdir dir;
    std::mt19937 rng(static_cast<unsigned>(rank * 10 + f16));
    std::vector<std::int64_t> qs{2, 3, 5, 8}, ks{2, 3, 7, 8}, vs{2, 3, 7, 12};
    qs.erase(qs.begin(), qs.begin() + (4 - rank));
    ks.erase(ks.begin(), ks.begin() + (4 - rank));
    vs.erase(vs.begin(), vs.begin() + (4 - rank));
    const auto q = write_tensor(rng, dir / "q.npy", qs, f16), k = write_tensor(rng, dir / "k.npy", ks, f16),
               v = write_tensor(rng, dir / "v.npy", vs, f16);
    // Each rank also exercises one spelling of the causal flag (a bare --causal is top-left).
    const std::string causal_flag = rank == 2 ? "--causal" : rank == 3 ? "--causal=top-left" : "--causal=bottom-right";
    const Causal causal = rank == 4 ? Causal::bottom_right : Causal::top_left;
    // And one logits stage (the default, masked, where none is named).
    const LogitsStage stage = rank == 2 ? LogitsStage::masked : rank == 3 ? LogitsStage::scaled : LogitsStage::softcapped;
    const std::string stage_flag = rank == 2 ? "" : " --softcap 0.5 --logits-stage " + to_string(stage);
    const Result r = vk_attn("run --q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy" + " " +
                             causal_flag + " --out " + dir / "o.npy" + " --weights " + dir / "w.npy" + " --lse " +
                             dir / "l.npy" + " --logits " + dir / "s.npy" + stage_flag);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains("unfused"));  // the path that ran is reported
    const npy::Array o = npy::read(dir / "o.npy"), w = npy::read(dir / "w.npy"), l = npy::read(dir / "l.npy"),
                     s = npy::read(dir / "s.npy");
    auto expect_shape = qs;
    expect_shape.back() = vs.back();
    CHECK(o.shape == expect_shape);
    CHECK(o.type == npy::ElementType::f32);
    expect_shape.back() = ks[ks.size() - 2];
    CHECK(w.shape == expect_shape);
    CHECK(s.shape == expect_shape);
    CHECK(l.shape == std::vector<std::int64_t>(qs.begin(), qs.end() - 1));

    // The library's reference on the same (rounded) values.
    const auto q4 = as4(qs), k4 = as4(ks), v4 = as4(vs);
    std::array<std::int64_t, 4> o4{q4[0], q4[1], q4[2], v4[3]};
    std::vector<float> ref(test::element_count(o4));
    AttentionInputs in{.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, q4),
                       .k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, k4),
                       .v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, v4)};
    std::vector<float> ref_logits(static_cast<std::size_t>(s.count()));
    std::optional<double> softcap;
    if (rank != 2) softcap = 0.5;
    reference_attention(in, {.o = make_view<void*>(ref.data(), DType::f32, Layout::bhnd, o4), .logits = ref_logits.data()},
                        {.causal = causal, .softcap = softcap, .logits_stage = stage});
    const Comparison c = compare({o.as<float>(), o.as<float>() + o.count()}, {ref.begin(), ref.end()},
                                 tolerance_for(f16 ? DType::f16 : DType::f32));
    INFO(c.message);
    CHECK(c.ok);
    const Comparison cs = compare({s.as<float>(), s.as<float>() + s.count()}, {ref_logits.begin(), ref_logits.end()},
                                  tolerance_for(DType::f32));
    INFO("logits: " << cs.message);
    CHECK(cs.ok);
}

TEST_CASE("cli run --devices: the call split over two contexts writes what one device writes", "[cli]") {
    Workdir dir;
    std::mt19937 rng(23);
    write_tensor(rng, dir / "q.npy", {3, 4, 9, 16}, false);
    write_tensor(rng, dir / "k.npy", {3, 2, 21, 16}, false);
    write_tensor(rng, dir / "v.npy", {3, 2, 21, 16}, false);
    const std::string inputs = " --q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy" +
                               " --causal=bottom-right --dropout 0.2 --seed 3 --impl unfused";
    const Result one = vk_attn("run" + inputs + " --out " + dir / "o1.npy" + " --weights " + dir / "w1.npy");
    const Result two = vk_attn("run" + inputs + " --devices 0,0 --out " + dir / "o2.npy" + " --weights " + dir / "w2.npy");
    INFO(one.err << two.err);
    REQUIRE(one.status == 0);
    REQUIRE(two.status == 0);
    CHECK_THAT(two.err, Catch::Contains("2 devices"));
    for (const auto& [a, b] : {std::pair{"o1.npy", "o2.npy"}, std::pair{"w1.npy", "w2.npy"}})
        expect_same_floats(dir / a, dir / b);
}

TEST_CASE("cli run: Fortran-order and big-endian .npy inputs give the same output as C-order ones", "[cli][npy]") {
    Workdir dir;
    std::mt19937 rng(31);
    const std::vector<std::int64_t> qs{2, 3, 5, 8}, ks{2, 3, 7, 8}, vs{2, 3, 7, 12};
    const auto q = write_tensor(rng, dir / "q.npy", qs, false), k = write_tensor(rng, dir / "k.npy", ks, false),
               v = write_tensor(rng, dir / "v.npy", vs, false);
    // What np.save writes for a transposed export such as (W @ X.T).T (Fortran order), for
    // x.astype('>f4') (big-endian), and for both.
    write_f32_as_numpy(dir / "q_fortran.npy", q, qs, true, false);
    write_f32_as_numpy(dir / "k_big.npy", k, ks, false, true);
    write_f32_as_numpy(dir / "v_fortran_big.npy", v, vs, true, true);
    const Result c_order = vk_attn("run --q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy" +
                                   " --causal --out " + dir / "o.npy" + " --lse " + dir / "l.npy");
    INFO(c_order.err);
    REQUIRE(c_order.status == 0);
    const std::vector<std::pair<std::string, std::string>> variants{
        {"q", "--q " + dir / "q_fortran.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy"},
        {"all", "--q " + dir / "q_fortran.npy" + " --k " + dir / "k_big.npy" + " --v " + dir / "v_fortran_big.npy"},
    };
    for (const auto& [name, inputs] : variants) {
        const Result r = vk_attn("run " + inputs + " --causal --out " + dir / ("o_" + name + ".npy") + " --lse " +
                                 dir / ("l_" + name + ".npy"));
        INFO("vk-attn run " << inputs << "\nstderr: " << r.err);
        REQUIRE(r.status == 0);
        for (const char* out : {"o", "l"}) {
            const npy::Array want = npy::read(dir / (std::string(out) + ".npy"));
            const npy::Array got = npy::read(dir / (std::string(out) + "_" + name + ".npy"));
            INFO(out);
            CHECK(got.shape == want.shape);
            CHECK(got.data == want.data);  // the same inputs reach the same dispatches
        }
    }
}

TEST_CASE("cli run: bad input exits 1 with one line naming the file or flag, writing nothing", "[cli]") {
    Workdir dir;
    std::mt19937 rng(3);
    write_tensor(rng, dir / "q.npy", {2, 4, 5, 8}, false);
    write_tensor(rng, dir / "k.npy", {2, 2, 7, 8}, false);
    write_tensor(rng, dir / "v.npy", {2, 2, 7, 8}, false);
    write_tensor(rng, dir / "k3.npy", {2, 3, 7, 8}, false);
    write_tensor(rng, dir / "kd.npy", {2, 2, 7, 9}, false);
    std::vector<std::int32_t> ints(2 * 4 * 5 * 8, 1);
    npy::write(dir / "qi.npy", npy::ElementType::i32, {2, 4, 5, 8}, ints.data());
    std::vector<float> mask(3 * 7, 0.0f);
    npy::write(dir / "mask.npy", npy::ElementType::f32, {3, 7}, mask.data());
    { std::ofstream(dir / "corrupt.npy") << "this is not numpy"; }
    {  // truncated: a valid header, half the data
        std::ifstream in(dir / "q.npy", std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), {});
        std::ofstream(dir / "short.npy", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    }
    const std::string inputs = " --k " + dir / "k.npy" + " --v " + dir / "v.npy";
    struct Bad {
        std::string args, names;
    };
    const std::vector<Bad> cases{
        {"--q " + dir / "missing.npy" + inputs, "missing.npy"},
        {"--q " + dir / "corrupt.npy" + inputs, "corrupt.npy"},
        {"--q " + dir / "short.npy" + inputs, "truncated"},
        {"--q " + dir / "qi.npy" + inputs, "qi.npy"},
        {"--q " + dir / "q.npy" + " --k " + dir / "kd.npy" + " --v " + dir / "v.npy", "--k"},
        {"--q " + dir / "q.npy" + " --k " + dir / "k3.npy" + " --v " + dir / "k3.npy", "multiple"},
        {"--q " + dir / "q.npy" + inputs + " --mask " + dir / "mask.npy", "--mask"},
        {"--q " + dir / "q.npy" + inputs + " --impl fused --weights " + dir / "w.npy", "--weights"},
        {"--q " + dir / "q.npy" + inputs + " --impl split --logits " + dir / "w.npy", "--logits"},
        {"--q " + dir / "q.npy" + inputs + " --logits " + dir / "w.npy" + " --logits-stage raw", "--logits-stage"},
        {"--q " + dir / "q.npy" + inputs + " --logits-stage scaled", "--logits-stage"},
        {"--q " + dir / "q.npy" + inputs + " --devices 0,,0", "--devices"},
        {"--q " + dir / "q.npy" + inputs + " --causal=sideways", "--causal"},
        {"--q " + dir / "q.npy" + inputs + " --kv-lengths " + dir / "mask.npy", "--kv-lengths"},
    };
    for (const auto& bad : cases) {
        const Result r = vk_attn("run " + bad.args + " --out " + dir / "o.npy" + " --lse " + dir / "l.npy");
        INFO("vk-attn run " << bad.args << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, Catch::Contains(bad.names));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o.npy"));
        CHECK_FALSE(fs::exists(dir / "l.npy"));
        CHECK_FALSE(fs::exists(dir / "w.npy"));
    }
}

TEST_CASE("cli run: the model-feature flags reach the library and match the reference", "[cli][features]") {
    Workdir dir;
    std::mt19937 rng(11);
    const std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 9, Nkv = 30, D = 16;
    const auto q = write_tensor(rng, dir / "q.npy", {B, Hq, Nq, D}, false);
    const auto k = write_tensor(rng, dir / "k.npy", {B, Hkv, Nkv, D}, false);
    const auto v = write_tensor(rng, dir / "v.npy", {B, Hkv, Nkv, D}, false);
    const std::vector<float> sinks{0.5f, -1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
    const std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f};
    npy::write(dir / "sinks.npy", npy::ElementType::f32, {Hq}, sinks.data());
    npy::write(dir / "slopes.npy", npy::ElementType::f32, {Hq}, slopes.data());
    const std::string impl = GENERATE("unfused", "fused", "split");
    const Result r = vk_attn("run --q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy" +
                             " --impl " + impl + " --causal-offset 15 --window=12,-1 --softcap 4 --alibi-slopes " +
                             dir / "slopes.npy" + " --sinks " + dir / "sinks.npy" +
                             " --dropout 0.25 --seed 77 --out " + dir / "o.npy" + " --lse " + dir / "l.npy");
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains(impl));  // the path that ran
    const npy::Array o = npy::read(dir / "o.npy"), l = npy::read(dir / "l.npy");

    std::vector<float> ref(static_cast<std::size_t>(B * Hq * Nq * D)), ref_lse(static_cast<std::size_t>(B * Hq * Nq));
    AttentionInputs in{.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, D}),
                       .k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, {B, Hkv, Nkv, D}),
                       .v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, {B, Hkv, Nkv, D}),
                       .alibi_slopes = slopes, .sinks = sinks};
    reference_attention(in, {.o = make_view<void*>(ref.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, D}), .lse = ref_lse.data()},
                        {.causal_offset = 15, .window = {12, -1}, .softcap = 4.0, .dropout = 0.25, .seed = 77});
    const Comparison c = compare({o.as<float>(), o.as<float>() + o.count()}, {ref.begin(), ref.end()}, tolerance_for(DType::f32));
    INFO(c.message);
    CHECK(c.ok);
    const Comparison cl = compare_lse({l.as<float>(), l.as<float>() + l.count()}, {ref_lse.begin(), ref_lse.end()});
    INFO(cl.message);
    CHECK(cl.ok);
}

TEST_CASE("cli run: bad model-feature flags exit 1 naming the flag", "[cli][features]") {
    Workdir dir;
    std::mt19937 rng(12);
    write_tensor(rng, dir / "q.npy", {1, 4, 5, 8}, false);
    write_tensor(rng, dir / "k.npy", {1, 4, 7, 8}, false);
    write_tensor(rng, dir / "v.npy", {1, 4, 7, 8}, false);
    const std::vector<float> three{1, 2, 3};
    npy::write(dir / "three.npy", npy::ElementType::f32, {3}, three.data());
    const std::string inputs = "--q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy";
    const std::vector<std::pair<std::string, std::string>> cases{
        {"--window 5", "--window"},
        {"--window=a,b", "--window"},
        {"--window=-3,0", "--window"},
        {"--softcap 0", "--softcap"},
        {"--softcap -2", "--softcap"},
        {"--dropout 1", "--dropout"},
        {"--sinks " + dir / "three.npy", "--sinks"},
        {"--alibi-slopes " + dir / "three.npy", "--alibi-slopes"},
        {"--alibi-slopes " + dir / "three.npy" + " --alibi-max-bias 8", "excludes"},
        {"--alibi-max-bias -1", "--alibi-max-bias"},
        {"--causal=bottom-right --causal-offset 2", "--causal-offset"},
        {"--sinks " + dir / "missing.npy", "missing.npy"},
    };
    for (const auto& [flags, names] : cases) {
        const Result r = vk_attn("run " + inputs + " " + flags + " --out " + dir / "o.npy");
        INFO("vk-attn run " << flags << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, Catch::Contains(names));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o.npy"));
    }
}

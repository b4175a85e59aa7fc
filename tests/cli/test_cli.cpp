// The vk-attn tool end to end: run round-trips through .npy files of every accepted rank and dtype
// and agrees with the library's reference, and reads Fortran-order and big-endian files as NumPy
// writes them; every bad input exits 1 with one line naming the file or flag and leaves no output
// behind; bench --json parses; check passes.
#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "npy.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/vkattn.hpp"

namespace fs = std::filesystem;
using namespace vkattn;
using namespace vkattn::testing;

namespace {

struct Result {
    int status = -1;
    std::string out, err;
};

// Runs vk-attn with arguments; captures stdout and stderr through files.
Result vk_attn_with(const std::string& program, const std::string& args) {
    static int counter = 0;
    const fs::path dir = fs::temp_directory_path() / ("vkattn-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path out = dir / ("out" + std::to_string(counter) + ".txt"), err = dir / ("err" + std::to_string(counter++) + ".txt");
    const std::string command = program + " " + args + " >" + out.string() + " 2>" + err.string();
    const int raw = std::system(command.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    auto slurp = [](const fs::path& p) {
        std::ifstream in(p);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    };
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

Result vk_attn(const std::string& args) { return vk_attn_with(VK_ATTN_PATH, args); }

struct Workdir {
    fs::path path;
    Workdir() : path(fs::temp_directory_path() / ("vkattn-cli-case-" + std::to_string(::getpid()) + "-" + std::to_string(next()))) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~Workdir() { fs::remove_all(path); }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
    static int next() {
        static int n = 0;
        return n++;
    }
};

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

std::size_t count(const std::vector<std::int64_t>& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
}

// Writes a random tensor as f32 or f16 and returns its values as the file holds them (as float).
std::vector<float> write_tensor(std::mt19937& rng, const std::string& path, const std::vector<std::int64_t>& shape, bool f16) {
    auto values = random_floats(rng, count(shape));
    if (!f16) {
        npy::write(path, npy::ElementType::f32, shape, values.data());
        return values;
    }
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        bits[i] = float_to_half(values[i]);
        values[i] = half_to_float(bits[i]);
    }
    npy::write(path, npy::ElementType::f16, shape, bits.data());
    return values;
}

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

std::array<std::int64_t, 4> as4(const std::vector<std::int64_t>& s) {
    std::array<std::int64_t, 4> r{1, 1, 1, 1};
    for (std::size_t i = 0; i < s.size(); ++i) r[4 - s.size() + i] = s[i];
    return r;
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
    std::vector<float> ref(count({o4[0], o4[1], o4[2], o4[3]}));
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

// Two float32 .npy files of one shape, within fp32 tolerance of each other.
static void expect_same_floats(const fs::path& a, const fs::path& b, Tolerance tolerance = tolerance_for(DType::f32)) {
    const npy::Array x = npy::read(a), y = npy::read(b);
    CHECK(x.shape == y.shape);
    const Comparison c = compare({x.as<float>(), x.as<float>() + x.count()}, {y.as<float>(), y.as<float>() + y.count()},
                                 tolerance);
    INFO(a.filename().string() << ": " << c.message);
    CHECK(c.ok);
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

#ifdef VKATTN_MPIEXEC
// vk-attn under mpirun: `ranks` processes, one lavapipe instance each.
Result mpi_vk_attn(int ranks, const std::string& args) {
    return vk_attn_with(std::string(VKATTN_MPIEXEC) + " -np " + std::to_string(ranks) +
                            " --allow-run-as-root --oversubscribe --mca btl self,tcp " + VK_ATTN_PATH,
                        args);
}

TEST_CASE("cli run --context-parallel: mpirun -np 2 and 3 write what one device writes", "[cli][distributed]") {
    Workdir dir;
    std::mt19937 rng(41);
    write_tensor(rng, dir / "q.npy", {2, 4, 53, 16}, false);
    write_tensor(rng, dir / "k.npy", {2, 2, 53, 16}, false);
    write_tensor(rng, dir / "v.npy", {2, 2, 53, 16}, false);
    const std::string inputs = " --q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy" +
                               " --causal --window=20,-1 --dropout 0.1 --seed 9";
    const Result one = vk_attn("run" + inputs + " --out " + dir / "o.npy" + " --lse " + dir / "l.npy");
    REQUIRE(one.status == 0);
    for (const auto& [ranks, zigzag] : {std::pair{2, ""}, std::pair{3, " --zigzag"}, std::pair{3, ""}}) {
        const Result r = mpi_vk_attn(ranks, "run" + inputs + " --context-parallel" + zigzag + " --out " + dir / "o_cp.npy" +
                                                " --lse " + dir / "l_cp.npy");
        INFO(ranks << " ranks" << zigzag << "\n" << r.err);
        REQUIRE(r.status == 0);
        CHECK_THAT(r.err, Catch::Contains("ring attention over " + std::to_string(ranks) + " ranks"));
        for (const auto& [a, b] : {std::pair{"o.npy", "o_cp.npy"}, std::pair{"l.npy", "l_cp.npy"}})
            expect_same_floats(dir / a, dir / b);
        fs::remove(dir / "o_cp.npy");
        fs::remove(dir / "l_cp.npy");
    }
    // Masks: each rank reads its rows of a [B, 1, N, N] bool mask; a float [N] padding mask (no row
    // axis) whole; a mask whose rows are neither N nor 1 is refused by name.
    std::vector<std::uint8_t> allowed(2 * 53 * 53);
    std::vector<float> padding(53);
    std::bernoulli_distribution keep(0.8);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (auto& a : allowed) a = keep(rng) ? 1 : 0;
    for (auto& p : padding) p = keep(rng) ? uniform(rng) : -std::numeric_limits<float>::infinity();
    npy::write(dir / "bool.npy", npy::ElementType::boolean, {2, 1, 53, 53}, allowed.data());
    npy::write(dir / "padding.npy", npy::ElementType::f32, {53}, padding.data());
    npy::write(dir / "short.npy", npy::ElementType::f32, {52, 53}, std::vector<float>(52 * 53).data());
    for (const char* mask : {"bool.npy", "padding.npy"}) {
        const Result single = vk_attn("run" + inputs + " --mask " + dir / mask + " --out " + dir / "om.npy" + " --lse " + dir / "lm.npy");
        REQUIRE(single.status == 0);
        const Result r = mpi_vk_attn(3, "run" + inputs + " --mask " + dir / mask + " --context-parallel --zigzag --out " +
                                            dir / "om_cp.npy" + " --lse " + dir / "lm_cp.npy");
        INFO(mask << "\n" << r.err);
        REQUIRE(r.status == 0);
        for (const auto& [a, b] : {std::pair{"om.npy", "om_cp.npy"}, std::pair{"lm.npy", "lm_cp.npy"}})
            expect_same_floats(dir / a, dir / b);
    }
    const Result short_mask = mpi_vk_attn(2, "run" + inputs + " --mask " + dir / "short.npy" + " --context-parallel --out " +
                                                 dir / "o_cp.npy");
    CHECK(short_mask.status != 0);
    CHECK_THAT(short_mask.err, Catch::Contains("--mask") && Catch::Contains("52 rows"));
    // Every output: the weights and logits over the whole's keys, the backward's gradients, the K and
    // V the kernels saw; rank 0 writes what one device writes.
    write_tensor(rng, dir / "g.npy", {2, 4, 53, 16}, false);
    const std::vector<std::string> outputs{"w", "logits", "dq", "dk", "dv", "dsinks", "kseen"};
    auto everything = [&](const std::string& tag) {
        return " --grad-out " + dir / "g.npy" + " --sinks " + dir / "sinks.npy" + " --weights " + dir / ("w" + tag) +
               " --logits " + dir / ("logits" + tag) + " --dq " + dir / ("dq" + tag) + " --dk " + dir / ("dk" + tag) +
               " --dv " + dir / ("dv" + tag) + " --dsinks " + dir / ("dsinks" + tag) + " --dequantized-k " + dir / ("kseen" + tag);
    };
    const std::vector<float> sinks{0.5f, -1.0f, 0.0f, 1.5f};
    npy::write(dir / "sinks.npy", npy::ElementType::f32, {4}, sinks.data());
    const Result single_all = vk_attn("run" + inputs + " --out " + dir / "o_all.npy" + everything(".npy"));
    INFO(single_all.err);
    REQUIRE(single_all.status == 0);
    const Result ring_all = mpi_vk_attn(3, "run" + inputs + " --context-parallel --zigzag --out " + dir / "o_all_cp.npy" +
                                               everything("_cp.npy"));
    INFO(ring_all.err);
    REQUIRE(ring_all.status == 0);
    CHECK_THAT(ring_all.err, Catch::Contains("ring backward"));
    for (const std::string& name : outputs)
        expect_same_floats(dir / (name + ".npy"), dir / (name + "_cp.npy"), gradient_tolerance_for(DType::f32));
    // One device per rank: --devices is refused on every rank, nothing written.
    const Result bad = mpi_vk_attn(2, "run" + inputs + " --context-parallel --devices 0,0 --out " + dir / "o_cp.npy");
    CHECK(bad.status != 0);
    CHECK_THAT(bad.err, Catch::Contains("--devices"));
    CHECK_FALSE(fs::exists(dir / "o_cp.npy"));
}

TEST_CASE("cli bench --context-parallel: the ring's forward and backward rows", "[cli][distributed]") {
    for (const std::string backward : {"", " --backward"}) {
        const Result r = mpi_vk_attn(2, "bench --context-parallel --zigzag --causal --seq 96 --heads 2 --dim 16 --repeat 2 "
                                        "--warmup 0 --json" + backward);
        INFO(r.err);
        REQUIRE(r.status == 0);
        const nlohmann::json row = nlohmann::json::parse(r.out);  // one point: one object
        CHECK(row["impl"] == (backward.empty() ? "ring" : "ring_backward"));
        CHECK(row["ranks"] == 2);
        CHECK(row["gflops"].get<double>() > 0.0);
        CHECK(row["blocks_skipped"].get<int>() > 0);  // zigzag: causal hides some pairs
        // K and V per step (f32: 2 · B·Hkv·48·D·4 bytes); the backward's dK/dV accumulators as many again.
        const double mib = 2.0 * 2 * 48 * 16 * 4 / (1 << 20);
        CHECK(row["mib_sent_per_step"].get<double>() == Approx(backward.empty() ? mib : 2 * mib));
    }
    const Result quantized = mpi_vk_attn(2, "bench --context-parallel --backward --seq 64 --dim 32 --kv-dtype q8_0");
    CHECK(quantized.status != 0);
    CHECK_THAT(quantized.err, Catch::Contains("--kv-dtype"));
}
#endif

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

TEST_CASE("cli run --grad-out: the gradients of every input, as the reference's; bad backward flags named", "[cli][backward]") {
    Workdir dir;
    std::mt19937 rng(17);
    const std::vector<float> q = write_tensor(rng, dir / "q.npy", {4, 9, 16}, false);   // rank 3: [H, N, D]
    const std::vector<float> k = write_tensor(rng, dir / "k.npy", {2, 11, 16}, false);
    const std::vector<float> v = write_tensor(rng, dir / "v.npy", {2, 11, 12}, false);
    const std::vector<float> g = write_tensor(rng, dir / "g.npy", {4, 9, 12}, false);
    std::vector<float> sinks{0.5f, -1.0f, 0.25f, 2.0f};
    npy::write(dir / "sinks.npy", npy::ElementType::f32, {4}, sinks.data());
    const std::string inputs = "--q " + dir / "q.npy" + " --k " + dir / "k.npy" + " --v " + dir / "v.npy";
    const std::string impl = GENERATE("auto", "unfused");  // the fused backward, or three stages
    const Result r = vk_attn("run " + inputs + " --causal=bottom-right --sinks " + dir / "sinks.npy" + " --grad-out " +
                             dir / "g.npy" + " --out " + dir / "o.npy" + " --dq " + dir / "dq.npy" + " --dk " +
                             dir / "dk.npy" + " --dv " + dir / "dv.npy" + " --dsinks " + dir / "ds.npy" + " --impl " + impl);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains(impl == std::string("auto") ? "backward [" : "unfused-backward["));

    AttentionInputs in{.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, {1, 4, 9, 16}),
                       .k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, {1, 2, 11, 16}),
                       .v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, {1, 2, 11, 12}),
                       .sinks = sinks};
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), ds(4);
    AttentionGradients grads{.dq = make_view<void*>(dq.data(), DType::f32, Layout::bhnd, {1, 4, 9, 16}),
                             .dk = make_view<void*>(dk.data(), DType::f32, Layout::bhnd, {1, 2, 11, 16}),
                             .dv = make_view<void*>(dv.data(), DType::f32, Layout::bhnd, {1, 2, 11, 12}),
                             .d_sinks = ds.data()};
    reference_attention_backward(in, make_view<const void*>(g.data(), DType::f32, Layout::bhnd, {1, 4, 9, 12}), grads,
                                 {.causal = Causal::bottom_right});
    for (const auto& [name, want, shape] :
         {std::tuple{"dq.npy", &dq, std::vector<std::int64_t>{4, 9, 16}}, std::tuple{"dk.npy", &dk, std::vector<std::int64_t>{2, 11, 16}},
          std::tuple{"dv.npy", &dv, std::vector<std::int64_t>{2, 11, 12}}, std::tuple{"ds.npy", &ds, std::vector<std::int64_t>{4}}}) {
        const npy::Array got = npy::read(dir / name);
        INFO(name);
        CHECK(got.shape == shape);
        const Comparison c = compare(std::vector<double>(got.as<float>(), got.as<float>() + got.count()),
                                     std::vector<double>(want->begin(), want->end()), gradient_tolerance_for(DType::f32));
        INFO(c.message);
        CHECK(c.ok);
    }

    struct Bad {
        std::string args, names;
    };
    const std::vector<Bad> cases{
        {inputs + " --dq " + dir / "x.npy", "--dq"},
        {inputs + " --grad-out " + dir / "g.npy", "--grad-out"},
        {inputs + " --grad-out " + dir / "q.npy" + " --dq " + dir / "x.npy", "--grad-out"},
        {inputs + " --grad-out " + dir / "g.npy" + " --dsinks " + dir / "x.npy", "--dsinks"},
        {inputs + " --grad-out " + dir / "g.npy" + " --dq " + dir / "x.npy" + " --kv-dtype q8_0", "--k"},
    };
    for (const auto& bad : cases) {
        const Result e = vk_attn("run " + bad.args + " --out " + dir / "o2.npy");
        INFO("vk-attn run " << bad.args << "\nstderr: " << e.err);
        CHECK(e.status == 1);
        CHECK_THAT(e.err, Catch::Contains(bad.names));
        CHECK(std::count(e.err.begin(), e.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o2.npy"));
        CHECK_FALSE(fs::exists(dir / "x.npy"));
    }
}

TEST_CASE("cli bench --backward --validate: the backward timed and checked against the reference", "[cli][backward]") {
    const Result r = vk_attn("bench --backward --validate --seq 70 --heads 2 --dim 24 --causal --repeat 1 --warmup 0 --json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const nlohmann::json point = nlohmann::json::parse(r.out);
    CHECK(point["impl"] == "backward");
    CHECK(point["valid"] == true);
    CHECK(point["gflops"].get<double>() > 0.0);
    CHECK(point["fwd_bwd_ms"].get<double>() > point["median_ms"].get<double>());
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

TEST_CASE("cli mha: a PyTorch fixture from both weight formats matches PyTorch's output", "[cli][mha]") {
    const fs::path dir = fs::path(VKATTN_FIXTURES) / "mha" / "data" / "cross_mask3d_bool_kpm_bool";
    const auto meta = nlohmann::json::parse(std::ifstream(dir / "case.json"));
    REQUIRE(meta["batch_first"] == true);
    REQUIRE(meta["need_weights"] == true);
    Workdir out;
    const std::string weights = GENERATE("weights", "weights.safetensors");
    const std::string impl = GENERATE("auto", "unfused");
    const Result r = vk_attn("mha --query " + (dir / "query.npy").string() + " --key " + (dir / "key.npy").string() +
                             " --value " + (dir / "value.npy").string() + " --weights " + (dir / weights).string() +
                             " --num-heads " + std::to_string(meta["num_heads"].get<int>()) + " --batch-first" +
                             " --key-padding-mask " + (dir / "key_padding_mask.npy").string() + " --attn-mask " +
                             (dir / "attn_mask.npy").string() + " --need-weights --impl " + impl + " --out " + out / "o.npy" +
                             " --attn-weights " + out / "w.npy");
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains("unfused"));  // the weights need the three-stage path; it is reported
    for (const auto& [got, want] : {std::pair{out / "o.npy", dir / "out.npy"}, std::pair{out / "w.npy", dir / "attn_weights.npy"}}) {
        const npy::Array g = npy::read(got), w = npy::read(want);
        CHECK(g.shape == w.shape);
        const Comparison c = compare({g.as<float>(), g.as<float>() + g.count()}, {w.as<float>(), w.as<float>() + w.count()},
                                     tolerance_for(DType::f32));
        INFO(want << ": " << c.message);
        CHECK(c.ok);
    }
}

TEST_CASE("cli mha: bad input exits 1 with one line naming the flag or file, writing nothing", "[cli][mha]") {
    const fs::path fixture = fs::path(VKATTN_FIXTURES) / "mha" / "data" / "self_packed";
    Workdir dir;
    std::mt19937 rng(21);
    const std::string q = (fixture / "query.npy").string(), w = (fixture / "weights").string();
    const auto meta = nlohmann::json::parse(std::ifstream(fixture / "case.json"));
    const std::string heads = std::to_string(meta["num_heads"].get<int>());
    write_tensor(rng, dir / "mask.npy", {3, 3}, false);
    fs::create_directories(dir / "empty");
    { std::ofstream(dir / "bad.safetensors") << "not a safetensors file"; }
    const std::vector<std::pair<std::string, std::string>> cases{
        {"--query " + q + " --weights " + dir / "missing" + " --num-heads " + heads, "--weights"},
        {"--query " + q + " --weights " + dir / "empty" + " --num-heads " + heads, "--weights"},
        {"--query " + q + " --weights " + dir / "bad.safetensors" + " --num-heads " + heads, "bad.safetensors"},
        {"--query " + q + " --weights " + w + " --num-heads 5", "--num-heads"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --attn-mask " + dir / "mask.npy", "--attn-mask"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --need-weights", "--attn-weights"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --key " + q, "--value"},
        {"--query " + dir / "mask.npy" + " --weights " + w + " --num-heads " + heads, "--query"},
        {"--query " + q + " --weights " + w + " --num-heads " + heads + " --dtype f64", "--dtype"},
    };
    for (const auto& [flags, names] : cases) {
        const Result r = vk_attn("mha " + flags + " --out " + dir / "o.npy");
        INFO("vk-attn mha " << flags << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, Catch::Contains(names));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o.npy"));
    }
}

TEST_CASE("cli mha --grad-out --grads: PyTorch autograd's gradients, one file per input and parameter", "[cli][mha][backward]") {
    // Cross-attention with kdim and vdim: separate q/k/v_proj_weight and three input gradients; and
    // self-attention: in_proj_weight, the query's gradient alone.
    for (const char* name : {"cross_kdim_vdim_mask2d_bool", "self_packed"}) {
        const fs::path dir = fs::path(VKATTN_FIXTURES) / "mha" / "data" / name;
        const auto meta = nlohmann::json::parse(std::ifstream(dir / "case.json"));
        const bool self = meta["self_attention"].get<bool>();
        INFO(name);
        Workdir out;
        std::string flags = "mha --query " + (dir / "query.npy").string() + " --weights " + (dir / "weights").string() +
                            " --num-heads " + std::to_string(meta["num_heads"].get<int>()) + " --out " + out / "o.npy" +
                            " --grad-out " + (dir / "grad_out.npy").string() + " --grads " + out / "grads" + " --impl unfused";
        if (!self) flags += " --key " + (dir / "key.npy").string() + " --value " + (dir / "value.npy").string();
        if (fs::exists(dir / "attn_mask.npy")) flags += " --attn-mask " + (dir / "attn_mask.npy").string();
        const Result r = vk_attn(flags);
        INFO(r.err);
        REQUIRE(r.status == 0);
        CHECK_THAT(r.err, Catch::Contains("backward: attention unfused"));
        std::vector<std::string> want, got;
        for (const auto& e : fs::directory_iterator(dir / "grads")) want.push_back(e.path().filename().string());
        const fs::path written(out / "grads");
        for (const auto& e : fs::directory_iterator(written)) got.push_back(e.path().filename().string());
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        CHECK(got == want);
        for (const std::string& file : want) {
            if (!fs::exists(written / file)) continue;
            const npy::Array g = npy::read(written / file), w = npy::read(dir / "grads" / file);
            CHECK(g.shape == w.shape);
            const Comparison c = compare({g.as<float>(), g.as<float>() + g.count()}, {w.as<float>(), w.as<float>() + w.count()},
                                         gradient_tolerance_for(DType::f32));
            INFO(file << ": " << c.message);
            CHECK(c.ok);
        }
    }
    // Refusals: one line naming the flag, nothing written (neither the output nor the directory).
    const fs::path fixture = fs::path(VKATTN_FIXTURES) / "mha" / "data" / "self_packed";
    Workdir dir;
    const std::string base = "mha --query " + (fixture / "query.npy").string() + " --weights " + (fixture / "weights").string() +
                             " --num-heads 2 --out " + dir / "o.npy";
    std::mt19937 rng(5);
    write_tensor(rng, dir / "short.npy", {5, 2, 7}, false);
    for (const auto& [flags, names] : std::vector<std::pair<std::string, std::string>>{
             {" --grad-out " + (fixture / "grad_out.npy").string(), "--grads"},
             {" --grads " + dir / "g", "--grad-out"},
             {" --grad-out " + dir / "short.npy" + " --grads " + dir / "g", "--grad-out"}}) {
        const Result r = vk_attn(base + flags);
        INFO(flags << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK_THAT(r.err, Catch::Contains(names));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "o.npy"));
        CHECK_FALSE(fs::exists(dir / "g"));
    }
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

std::vector<float> floats(const npy::Array& a) { return {a.as<float>(), a.as<float>() + a.count()}; }
std::vector<double> doubles(const npy::Array& a) { return {a.as<float>(), a.as<float>() + a.count()}; }

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

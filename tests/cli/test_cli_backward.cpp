// vk-attn's backward: run --grad-out writes the reference's gradients; bench --backward times and
// validates.
#include "cli/cli_support.hpp"

#include <tuple>

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::cli_test;

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

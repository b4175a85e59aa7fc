// vk-attn under mpirun: ring attention's run and bench across ranks write what one device writes.
#include "cli/cli_support.hpp"

#include <limits>

using namespace vkattn;
using namespace vkattn::testing;
using namespace vkattn::cli_test;

#ifdef VKATTN_MPIEXEC

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

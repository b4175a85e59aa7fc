// Ring attention over MPI (vkattn/distributed.hpp), run by ctest under mpirun with 2 and 3 ranks: every
// feature and both shardings, forward and backward, quantized K/V shards, the weights and logits,
// and zigzag's skipped blocks, each rank's shard against the CPU reference of the whole call
// (ring_cases.hpp). A rank's bad input, a lost device, a rank that never calls: test_ring_failures.cpp.
#include "distributed/ring_cases.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

using namespace vkattn;
using namespace vkattn::ring_test;

TEST_CASE("ring: every feature, both shardings, equals the whole on every rank", "[distributed]") {
    for_each_ring_case(expect_ring_equals_whole);
}

TEST_CASE("ring backward: every feature, both shardings, the whole's gradients on every rank", "[distributed]") {
    for_each_ring_case(expect_ring_gradients_equal_whole);
    RingCase bf16;  // the three-stage backward, bf16
    bf16.dtype = DType::bf16;
    bf16.sinks = true;
    bf16.options.impl = Impl::unfused;
    bf16.options.causal = Causal::bottom_right;
    expect_ring_gradients_equal_whole(bf16);
}

TEST_CASE("ring: quantized K/V shards travel as stored (ggml's blocks, fp8 with per-head scales)", "[distributed]") {
    for (const DType kv : {DType::q8_0, DType::q4_1, DType::fp8_e4m3}) {
        INFO(to_string(kv));
        RingCase c;
        c.D = 32;  // ggml's blocks run along the head dimension
        c.kv_dtype = kv;
        if (is_fp8(kv)) c.kv_scales = {0.02f, 0.05f};
        c.sharding = Sharding::zigzag;
        c.options.causal = Causal::top_left;
        expect_ring_equals_whole(c);
    }
}

TEST_CASE("ring: the weights and logits are this rank's rows of the whole's", "[distributed]") {
    const std::vector<std::pair<const char*, Setup>> cases{
        {"zigzag, bottom-right causal, lengths, sinks, float mask; masked logits", [](RingCase& c) {
             c.sharding = Sharding::zigzag;
             c.options.causal = Causal::bottom_right;
             c.lengths = c.sinks = c.float_mask = true;
         }},
        {"softcap and ALiBi, window; scaled logits", [](RingCase& c) {
             c.options.softcap = 2.0;
             c.slopes = true;
             c.options.window = {7, 3};
             c.options.logits_stage = LogitsStage::scaled;
         }},
        {"dropout, GQA; softcapped logits", [](RingCase& c) {
             c.options.dropout = 0.25;
             c.options.seed = 5;
             c.options.softcap = 4.0;
             c.options.logits_stage = LogitsStage::softcapped;
         }},
    };
    for (const auto& [name, setup] : cases) {
        INFO(name);
        RingCase c;
        c.scores = true;
        setup(c);
        expect_ring_equals_whole(c);
    }
    // The fused kernels write no weights: refused on every rank, as attention refuses them.
    std::mt19937 rng(8);
    const HostTensor t = good_of(rng);
    std::vector<float> weights(static_cast<std::size_t>(2 * 5 * 5 * ranks_of()));
    CHECK_THROWS_WITH(distributed::ring_attention(MPI_COMM_WORLD, context(), {.q = t.view(), .k = t.view(), .v = t.view()},
                                                  {.o = o16_of().mutable_view(), .weights = weights.data()}, {.impl = Impl::fused}),
                      Catch::StartsWith("impl: rank 0: ") && Catch::Contains("three-stage"));
}

TEST_CASE("ring: zigzag skips the blocks causal hides", "[distributed]") {
    const int P = ranks_of();
    std::mt19937 rng(1);
    const std::int64_t N = 8 * P;  // chunks of 4
    const HostTensor whole = random_tensor(rng, DType::f32, Layout::bhnd, {1, 1, N, 8});
    const std::vector<std::int64_t> lengths(static_cast<std::size_t>(P), 8);
    const HostTensor s = gather_rows(whole, distributed::shard_segments(Sharding::zigzag, N, lengths, rank_of()));
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, s.shape);
    const distributed::RingReport r = distributed::ring_attention(
        MPI_COMM_WORLD, context(), {.q = s.view(), .k = s.view(), .v = s.view()}, {.o = o.mutable_view()},
        {.causal = Causal::top_left}, {.sharding = Sharding::zigzag});
    // 2 × 2 segment pairs per step; causal hides every pair whose keys all follow its queries.
    CHECK(r.blocks_run + r.blocks_skipped == 4 * P);
    CHECK(r.blocks_skipped > 0);
    CHECK(r.bytes_sent == static_cast<std::uint64_t>(2 * 8 * 8 * 4 * (P - 1)));
}

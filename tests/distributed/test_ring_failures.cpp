// Ring attention's failures and device tensors: a rank with a bad shard, o, lse or gradients makes
// every rank throw its error naming it; a lost device or a rank that never calls leaves the others
// waiting at most the timeout, never hanging; device tensors give what host data gives.
#include "distributed/ring_cases.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

using namespace vkattn;
using namespace vkattn::ring_test;

TEST_CASE("ring: a rank with a bad shard makes every rank throw its error, naming it", "[distributed]") {
    const int me = rank_of();
    std::mt19937 rng(3);
    // The last rank's head dimension differs.
    const std::int64_t D = me == ranks_of() - 1 ? 12 : 16;
    const HostTensor t = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 5, D});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 5, D});
    try {
        distributed::ring_attention(MPI_COMM_WORLD, context(), {.q = t.view(), .k = t.view(), .v = t.view()},
                                    {.o = o.mutable_view()});
        FAIL("no error");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "shard");
        CHECK_THAT(e.what(), Catch::Contains("rank " + std::to_string(ranks_of() - 1)) && Catch::Contains("Dk"));
    }
    // Sinks are one per query head, checked as attention checks them.
    const std::vector<float> one_sink{0.5f};
    CHECK_THROWS_WITH(distributed::ring_attention(MPI_COMM_WORLD, context(),
                                                  {.q = good_of(rng).view(), .k = good_of(rng).view(),
                                                   .v = good_of(rng).view(), .sinks = one_sink},
                                                  {.o = o16_of().mutable_view()}),
                      Catch::StartsWith("sinks: rank 0: "));
    // A mask of the wrong shape, on one rank: its rows must be the shard's.
    const HostTensor good = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 5, 16});
    HostTensor o16 = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 5, 16});
    const std::vector<std::int64_t> mask_shape{me == ranks_of() - 1 ? 6 : 5, 5 * ranks_of()};
    std::vector<std::uint8_t> rows(static_cast<std::size_t>(mask_shape[0] * mask_shape[1]), 1);
    CHECK_THROWS_WITH(distributed::ring_attention(MPI_COMM_WORLD, context(),
                                                  {.q = good.view(), .k = good.view(), .v = good.view(),
                                                   .bool_mask = MaskView{rows.data(), mask_shape}},
                                                  {.o = o16.mutable_view()}),
                      Catch::StartsWith("bool_mask: rank " + std::to_string(ranks_of() - 1) + ": ") && Catch::Contains("6"));
}

TEST_CASE("ring backward: a rank's bad o, lse or gradients make every rank throw, naming it", "[distributed]") {
    const int last = ranks_of() - 1;
    std::mt19937 rng(5);
    const HostTensor t = good_of(rng), o = good_of(rng), grad = good_of(rng);
    HostTensor dq = o16_of(), dk = o16_of(), dv = o16_of();
    const AttentionInputs in{.q = t.view(), .k = t.view(), .v = t.view()};
    const std::vector<float> lse(10, 0.0f);
    // The last rank's lse is short.
    const std::span<const float> lse_here(lse.data(), rank_of() == last ? 9 : 10);
    CHECK_THROWS_WITH(distributed::ring_attention_backward(MPI_COMM_WORLD, context(), in, o.view(), lse_here, grad.view(),
                                                           {.dq = dq.mutable_view()}),
                      Catch::StartsWith("lse: rank " + std::to_string(last) + ": ") && Catch::Contains("B·Hq·n_q = 10"));
    CHECK_THROWS_WITH(distributed::ring_attention_backward(MPI_COMM_WORLD, context(), in, o.view(), lse, grad.view(),
                                                           {.dk = dk.mutable_view()}),
                      Catch::StartsWith("dv: rank 0: ") && Catch::Contains("together"));
    // grad_out of another dtype; a gradient of another shape.
    const HostTensor grad16 = random_tensor(rng, DType::f16, Layout::bhnd, {1, 2, 5, 16});
    CHECK_THROWS_WITH(distributed::ring_attention_backward(MPI_COMM_WORLD, context(), in, o.view(), lse, grad16.view(),
                                                           {.dq = dq.mutable_view()}),
                      Catch::StartsWith("grad_out: rank 0: "));
    HostTensor short_dk = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 4, 16});
    CHECK_THROWS_WITH(distributed::ring_attention_backward(MPI_COMM_WORLD, context(), in, o.view(), lse, grad.view(),
                                                           {.dk = short_dk.mutable_view(), .dv = dv.mutable_view()}),
                      Catch::StartsWith("dk: rank 0: "));
    // Nothing was written.
    for (const HostTensor* g : {&dq, &dk, &dv})
        for (const double x : g->doubles()) REQUIRE(std::isnan(x));
    CHECK(context().validation_messages().empty());
}

TEST_CASE("ring on device tensors: the same results as on host data, forward and backward", "[distributed]") {
    RingCase c;
    c.sharding = Sharding::zigzag;
    c.options.causal = Causal::bottom_right;
    c.lengths = c.sinks = c.bool_mask = c.float_mask = true;
    std::mt19937 rng(123);
    const RingData data(c, rng);
    const std::int64_t nq = data.q_shard.shape[2];
    const HostTensor grad = random_tensor(rng, c.dtype, Layout::bhnd, {c.B, c.Hq, nq, c.D});
    const distributed::RingOptions ring{.sharding = c.sharding, .timeout_s = 60};

    // On host data.
    HostTensor o = nan_tensor(c.dtype, Layout::bhnd, {c.B, c.Hq, nq, c.D});
    std::vector<float> lse(static_cast<std::size_t>(c.B * c.Hq * nq), NAN);
    distributed::ring_attention(MPI_COMM_WORLD, context(), data.shard, {.o = o.mutable_view(), .lse = lse.data()}, c.options, ring);
    HostTensor dq = nan_tensor(c.dtype, Layout::bhnd, data.q_shard.shape), dk = nan_tensor(c.dtype, Layout::bhnd, data.k_shard.shape),
               dv = nan_tensor(c.dtype, Layout::bhnd, data.v_shard.shape);
    std::vector<float> d_sinks(static_cast<std::size_t>(c.Hq), NAN), d_mask(data.added_shard.size(), NAN);
    distributed::ring_attention_backward(MPI_COMM_WORLD, context(), data.shard, o.view(), lse, grad.view(),
                                         {.dq = dq.mutable_view(), .dk = dk.mutable_view(), .dv = dv.mutable_view(),
                                          .d_sinks = d_sinks.data(), .d_float_mask = d_mask.data()},
                                         c.options, ring);

    // On device tensors (q in bnhd order on the device: any strides).
    Context& ctx = context();
    auto device = [&](const auto& values, DType dtype, const std::vector<std::int64_t>& shape) {
        std::array<std::int64_t, 4> s{1, 1, 1, 1};
        std::copy(shape.begin(), shape.end(), s.begin() + static_cast<std::ptrdiff_t>(4 - shape.size()));
        return DeviceTensor::from_host(ctx, make_view(static_cast<const void*>(values.data()), dtype, Layout::bhnd, s));
    };
    const DeviceAttentionInputs in{.q = DeviceTensor::from_host(ctx, data.q_shard.view(), Layout::bnhd),
                                   .k = DeviceTensor::from_host(ctx, data.k_shard.view()),
                                   .v = DeviceTensor::from_host(ctx, data.v_shard.view()),
                                   .kv_lengths = device(data.lengths, DType::i32, {c.B}),
                                   .bool_mask = device(data.allowed_shard, DType::u8, data.bool_shard_shape),
                                   .float_mask = device(data.added_shard, DType::f32, data.float_shard_shape),
                                   .sinks = data.sinks};
    const DeviceAttentionOutputs out{.o = DeviceTensor::empty(ctx, c.dtype, {c.B, c.Hq, nq, c.D}),
                                     .lse = DeviceTensor::empty(ctx, DType::f32, {c.B, c.Hq, nq, 1})};
    distributed::ring_attention(MPI_COMM_WORLD, ctx, in, out, c.options, ring);
    const DeviceAttentionGradients grads{.dq = DeviceTensor::empty(ctx, c.dtype, data.q_shard.shape),
                                         .dk = DeviceTensor::empty(ctx, c.dtype, data.k_shard.shape),
                                         .dv = DeviceTensor::empty(ctx, c.dtype, data.v_shard.shape),
                                         .d_sinks = DeviceTensor::empty(ctx, DType::f32, {1, 1, 1, c.Hq}),
                                         .d_float_mask = DeviceTensor::empty(ctx, DType::f32, in.float_mask.shape())};
    distributed::ring_attention_backward(MPI_COMM_WORLD, ctx, in, out.o, out.lse, DeviceTensor::from_host(ctx, grad.view()),
                                         grads, c.options, ring);

    auto host_of = [](const DeviceTensor& t) {
        HostTensor h = nan_tensor(t.dtype(), Layout::bhnd, t.shape());
        t.download(h.mutable_view());
        return h.doubles();
    };
    CHECK(host_of(out.o) == o.doubles());
    CHECK(host_of(out.lse) == std::vector<double>(lse.begin(), lse.end()));
    CHECK(host_of(grads.dq) == dq.doubles());
    CHECK(host_of(grads.dk) == dk.doubles());
    CHECK(host_of(grads.dv) == dv.doubles());
    CHECK(host_of(grads.d_sinks) == std::vector<double>(d_sinks.begin(), d_sinks.end()));
    CHECK(host_of(grads.d_float_mask) == std::vector<double>(d_mask.begin(), d_mask.end()));
    CHECK(ctx.validation_messages().empty());

    // A rank's bad device shard: every rank throws its error, naming it.
    const DeviceAttentionInputs no_v{.q = in.q, .k = in.k};
    const DeviceAttentionInputs& mine = rank_of() == ranks_of() - 1 ? no_v : in;
    CHECK_THROWS_WITH(distributed::ring_attention(MPI_COMM_WORLD, ctx, mine, out, c.options, ring),
                      Catch::StartsWith("v: rank " + std::to_string(ranks_of() - 1) + ": "));
    const DeviceAttentionOutputs wrong_lse{.o = out.o, .lse = DeviceTensor::empty(ctx, DType::f32, {c.B, c.Hq, nq, 2})};
    CHECK_THROWS_WITH(distributed::ring_attention(MPI_COMM_WORLD, ctx, in, wrong_lse, c.options, ring),
                      Catch::StartsWith("lse: rank 0: "));
}

TEST_CASE("ring: a rank whose device is lost mid-ring throws DeviceLost; the others give up after the timeout", "[distributed]") {
    // The ring talks over its own duplicate of the communicator: what the failed ring leaves behind
    // stays there, and the caller's communicator serves the next ring (below).
    const MPI_Comm comm = MPI_COMM_WORLD;
    const bool failing = rank_of() == ranks_of() - 1;
    ContextOptions options;
    options.validation = true;
    options.simulate_timeout_on_submission = failing ? 1 : 0;  // its first submission, past the agreement
    Context ctx(options);
    std::mt19937 rng(17);
    const HostTensor t = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 64, 16});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 64, 16});
    const auto start = std::chrono::steady_clock::now();
    try {
        distributed::ring_attention(comm, ctx, {.q = t.view(), .k = t.view(), .v = t.view()}, {.o = o.mutable_view()}, {},
                                    {.timeout_s = 3});
        FAIL("the ring finished");
    } catch (const DeviceLost& e) {
        CHECK(failing);
        CHECK_THAT(e.what(), Catch::Contains("simulated"));
    } catch (const Error& e) {
        CHECK_FALSE(failing);
        CHECK_THAT(e.what(), Catch::Contains("no answer"));
    }
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
    for (const double x : o.doubles()) REQUIRE(std::isnan(x));  // nothing written on any rank
    // Every rank on a working device again: the same communicator carries a good ring.
    MPI_Barrier(comm);
    RingCase again;
    again.options.causal = Causal::top_left;
    expect_ring_equals_whole(again);
}

TEST_CASE("ring: a rank that never calls leaves the others waiting at most the timeout", "[distributed]") {
    // A communicator of its own, never used again: the others' first collective stays posted on it.
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rank_of() == ranks_of() - 1) return;  // this rank never comes
    std::mt19937 rng(19);
    const HostTensor t = good_of(rng);
    HostTensor o = o16_of();
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(distributed::ring_attention(comm, context(), {.q = t.view(), .k = t.view(), .v = t.view()},
                                                  {.o = o.mutable_view()}, {}, {.timeout_s = 2}),
                      Catch::Contains("duplicating the communicator") && Catch::Contains("no answer"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

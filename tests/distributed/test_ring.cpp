// Ring attention over MPI (vkattn/distributed.hpp), run by ctest under mpirun with 2 and 3 ranks, each
// with its own lavapipe instance. Every rank builds the same whole inputs (the same seed), passes its
// shard, and checks its shard of o and lse against the CPU reference of the whole call: every
// feature, both shardings, uneven shards; a rank with a bad shard makes every rank throw, no hang.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "vkattn/distributed.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using distributed::Segment;
using distributed::Sharding;

namespace {

int rank_of() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int ranks_of() {
    int p = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    return p;
}

Context& context() {
    static Context c([] {
        ContextOptions o;
        o.validation = true;
        o.poison_outputs = true;
        return o;
    }());
    return c;
}

// The rows of `segments` of a [B, H, N, D] tensor, one after the other, as a new bhnd tensor.
HostTensor gather_rows(const HostTensor& t, const std::vector<Segment>& segments) {
    std::int64_t n = 0;
    for (const Segment& s : segments) n += s.length;
    HostTensor out = nan_tensor(t.dtype, Layout::bhnd, {t.shape[0], t.shape[1], n, t.shape[3]});
    const std::size_t element = size_of(t.dtype);
    const TensorView from = t.view();
    const MutableTensorView to = out.mutable_view();
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h) {
            std::int64_t row = 0;
            for (const Segment& s : segments)
                for (std::int64_t i = s.first; i < s.first + s.length; ++i, ++row)
                    std::memcpy(static_cast<char*>(to.data) + to.offset(b, h, row, 0) * static_cast<std::int64_t>(element),
                                static_cast<const char*>(from.data) + from.offset(b, h, i, 0) * static_cast<std::int64_t>(element),
                                element * static_cast<std::size_t>(t.shape[3]));
        }
    return out;
}

// Each rank's shard lengths: uneven (rank r holds base + r rows) for contiguous sharding.
std::vector<std::int64_t> contiguous_lengths(std::int64_t total, int P) {
    std::vector<std::int64_t> lengths;
    std::int64_t used = 0;
    const std::int64_t base = (total - P * (P - 1) / 2) / P;
    for (int r = 0; r < P; ++r) {
        lengths.push_back(r + 1 < P ? base + r : total - used);
        used += lengths.back();
    }
    return lengths;
}

struct RingCase {
    std::int64_t B = 2, Hq = 4, Hkv = 2, N = 53, D = 16;
    DType dtype = DType::f32;
    Sharding sharding = Sharding::contiguous;
    AttentionOptions options;
    bool lengths = false, sinks = false, slopes = false;
};

void expect_ring_equals_whole(const RingCase& c) {
    const int me = rank_of(), P = ranks_of();
    std::mt19937 rng(2024);  // the same whole on every rank
    const HostTensor q = random_tensor(rng, c.dtype, Layout::bhnd, {c.B, c.Hq, c.N, c.D});
    const HostTensor k = random_tensor(rng, c.dtype, Layout::bhnd, {c.B, c.Hkv, c.N, c.D});
    const HostTensor v = random_tensor(rng, c.dtype, Layout::bhnd, {c.B, c.Hkv, c.N, c.D});
    const std::vector<std::int32_t> lengths{static_cast<std::int32_t>(c.N - 9), static_cast<std::int32_t>(c.N)};
    std::vector<float> sinks, slopes;
    for (std::int64_t h = 0; h < c.Hq; ++h) {
        sinks.push_back(0.5f - 0.3f * static_cast<float>(h));
        slopes.push_back(0.1f + 0.05f * static_cast<float>(h));
    }
    AttentionInputs whole{.q = q.view(), .k = k.view(), .v = v.view()};
    if (c.lengths) whole.kv_lengths = lengths;
    if (c.sinks) whole.sinks = sinks;
    if (c.slopes) whole.alibi_slopes = slopes;
    HostTensor want = nan_tensor(c.dtype, Layout::bhnd, {c.B, c.Hq, c.N, c.D});
    std::vector<float> want_lse(static_cast<std::size_t>(c.B * c.Hq * c.N));
    reference_attention(whole, {.o = want.mutable_view(), .lse = want_lse.data()}, c.options);

    // This rank's shard.
    std::vector<std::int64_t> shard_lengths = contiguous_lengths(c.N, P);
    if (c.sharding == Sharding::zigzag)
        for (int r = 0; r < P; ++r) {
            std::int64_t n = 0;
            for (const Segment& s : distributed::shard_segments(Sharding::zigzag, c.N, shard_lengths, r)) n += s.length;
            shard_lengths[static_cast<std::size_t>(r)] = n;
        }
    const std::vector<Segment> mine = distributed::shard_segments(c.sharding, c.N, shard_lengths, me);
    const HostTensor qs = gather_rows(q, mine), ks = gather_rows(k, mine), vs = gather_rows(v, mine);
    AttentionInputs shard = whole;
    shard.q = qs.view();
    shard.k = ks.view();
    shard.v = vs.view();
    HostTensor o = nan_tensor(c.dtype, Layout::bhnd, {c.B, c.Hq, qs.shape[2], c.D});
    std::vector<float> lse(static_cast<std::size_t>(c.B * c.Hq * qs.shape[2]), NAN);
    const distributed::RingReport report = distributed::ring_attention(
        MPI_COMM_WORLD, context(), shard, {.o = o.mutable_view(), .lse = lse.data()}, c.options,
        {.sharding = c.sharding, .timeout_s = 60});
    CHECK(report.step_ms.size() == static_cast<std::size_t>(P));
    CHECK(report.blocks_run > 0);

    // The whole's rows of this shard.
    std::vector<double> want_o, want_l;
    for (std::int64_t b = 0; b < c.B; ++b)
        for (std::int64_t h = 0; h < c.Hq; ++h)
            for (const Segment& s : mine)
                for (std::int64_t i = s.first; i < s.first + s.length; ++i) {
                    want_l.push_back(want_lse[static_cast<std::size_t>((b * c.Hq + h) * c.N + i)]);
                    for (std::int64_t d = 0; d < c.D; ++d) want_o.push_back(want.at(b, h, i, d));
                }
    const Comparison co = compare(o.doubles(), want_o, tolerance_for(c.dtype));
    const Comparison cl = compare_lse({lse.begin(), lse.end()}, want_l);
    INFO("rank " << me << " of " << P << ": o: " << co.message << "\nlse: " << cl.message);
    CHECK(co.ok);
    CHECK(cl.ok);
    CHECK(context().validation_messages().empty());
}

}  // namespace

TEST_CASE("ring: every feature, both shardings, equals the whole on every rank", "[distributed]") {
    using Setup = std::function<void(RingCase&)>;
    const std::vector<std::pair<const char*, Setup>> cases{
        {"non-causal", [](RingCase&) {}},
        {"top-left causal", [](RingCase& c) { c.options.causal = Causal::top_left; }},
        {"bottom-right causal, key lengths", [](RingCase& c) {
             c.options.causal = Causal::bottom_right;
             c.lengths = true;
         }},
        {"causal window (9, -1)", [](RingCase& c) {
             c.options.causal = Causal::top_left;
             c.options.window = {9, -1};
         }},
        {"sinks, ALiBi, softcap", [](RingCase& c) {
             c.sinks = c.slopes = true;
             c.options.softcap = 3.0;
         }},
        {"ALiBi from its max bias, bottom-right causal", [](RingCase& c) {
             c.options.alibi_max_bias = 8.0;
             c.options.causal = Causal::bottom_right;
         }},
        {"dropout", [](RingCase& c) {
             c.options.dropout = 0.2;
             c.options.seed = 11;
         }},
        {"fp16, causal", [](RingCase& c) {
             c.dtype = DType::f16;
             c.options.causal = Causal::top_left;
         }},
        {"MQA, fused kernels forced", [](RingCase& c) {
             c.Hkv = 1;
             c.options.impl = Impl::fused;
         }},
    };
    for (const Sharding sharding : {Sharding::contiguous, Sharding::zigzag})
        for (const auto& [name, setup] : cases) {
            INFO(name << (sharding == Sharding::zigzag ? ", zigzag" : ", contiguous"));
            RingCase c;
            c.sharding = sharding;
            setup(c);
            expect_ring_equals_whole(c);
        }
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

static HostTensor good_of(std::mt19937& rng) { return random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 5, 16}); }
static HostTensor o16_of() { return nan_tensor(DType::f32, Layout::bhnd, {1, 2, 5, 16}); }

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
    // A mask is refused on every rank alike.
    const std::vector<std::uint8_t> mask(25, 1);
    const HostTensor good = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 5, 16});
    HostTensor o16 = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 5, 16});
    CHECK_THROWS_WITH(distributed::ring_attention(MPI_COMM_WORLD, context(),
                                                  {.q = good.view(), .k = good.view(), .v = good.view(),
                                                   .bool_mask = MaskView{mask.data(), {5, 5}}},
                                                  {.o = o16.mutable_view()}),
                      Catch::StartsWith("bool_mask: rank 0: "));
}

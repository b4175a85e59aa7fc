// Ring attention over MPI (vkattn/distributed.hpp), run by ctest under mpirun with 2 and 3 ranks, each
// with its own lavapipe instance. Every rank builds the same whole inputs (the same seed), passes its
// shard, and checks its shard of o and lse against the CPU reference of the whole call: every
// feature, both shardings, uneven shards; a rank with a bad shard makes every rank throw, no hang.
#include "support/catch.hpp"
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>

#include "support/suite_lifetime.hpp"
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
    return vkattn::test::suite_object([] {
        ContextOptions o;
        o.validation = true;
        o.poison_outputs = true;
        return Context(o);
    });
}

// The rows of `segments` of a [B, H, N, D] tensor, one after the other, as a new bhnd tensor (any
// storage type: rows are copied as bytes).
HostTensor gather_rows(const HostTensor& t, const std::vector<Segment>& segments) {
    std::int64_t n = 0;
    for (const Segment& s : segments) n += s.length;
    HostTensor out;
    out.dtype = t.dtype;
    out.shape = {t.shape[0], t.shape[1], n, t.shape[3]};
    if (t.dtype == DType::f32) out.f32.resize(static_cast<std::size_t>(out.count()));
    else if (t.dtype == DType::f16) out.f16.resize(static_cast<std::size_t>(out.count()));
    else out.bytes.resize(static_cast<std::size_t>(storage_bytes(t.dtype, out.count())));
    const TensorView from = t.view();
    const MutableTensorView to = out.mutable_view();
    const auto row = static_cast<std::size_t>(storage_bytes(t.dtype, t.shape[3]));
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h) {
            std::int64_t r = 0;
            for (const Segment& s : segments)
                for (std::int64_t i = s.first; i < s.first + s.length; ++i, ++r)
                    std::memcpy(static_cast<char*>(to.data) + storage_bytes(t.dtype, to.offset(b, h, r, 0)),
                                static_cast<const char*>(from.data) + storage_bytes(t.dtype, from.offset(b, h, i, 0)), row);
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
    std::optional<DType> kv_dtype;     // K and V stored in another type (q8_0, fp8: forward only)
    std::vector<float> kv_scales;      // fp8's per-head scales
    Sharding sharding = Sharding::contiguous;
    AttentionOptions options;
    bool lengths = false, sinks = false, slopes = false;
    bool bool_mask = false, float_mask = false;  // [B, 1, N, N] and [Hq, N, N]
    bool padding_mask = false;                   // a float [B, 1, 1, N]: broadcast over the query rows
    bool scores = false;                         // the weights and logits outputs too
};

// The rows of `segments` (dimension 2 of the mask's shape left-padded to rank 4) of a C-contiguous
// mask, or the mask itself when it broadcasts over the rows.
template <class T>
std::vector<T> mask_rows(const std::vector<T>& mask, const std::vector<std::int64_t>& shape, const std::vector<Segment>& segments,
                         std::vector<std::int64_t>& part_shape) {
    std::array<std::int64_t, 4> full{1, 1, 1, 1};
    std::copy(shape.begin(), shape.end(), full.begin() + static_cast<std::ptrdiff_t>(4 - shape.size()));
    part_shape = shape;
    if (full[2] == 1) return mask;
    std::vector<T> out;
    std::int64_t rows = 0;
    for (std::int64_t bh = 0; bh < full[0] * full[1]; ++bh)
        for (const Segment& s : segments) {
            const auto first = mask.begin() + (bh * full[2] + s.first) * full[3];
            out.insert(out.end(), first, first + s.length * full[3]);
            if (bh == 0) rows += s.length;
        }
    part_shape[part_shape.size() - 2] = rows;
    return out;
}

// A case's whole inputs (the same on every rank) and this rank's shard of them.
struct RingData {
    HostTensor q, k, v;
    std::vector<std::int32_t> lengths;
    std::vector<float> sinks, slopes;
    AttentionInputs whole;
    std::vector<Segment> mine;  // this rank's rows
    std::vector<std::uint8_t> allowed, allowed_shard;
    std::vector<float> added, added_shard;
    std::vector<std::int64_t> bool_shape, float_shape, bool_shard_shape, float_shard_shape;
    HostTensor q_shard, k_shard, v_shard;
    AttentionInputs shard;

    RingData(const RingCase& c, std::mt19937& rng)
        : q(random_tensor(rng, c.dtype, Layout::bhnd, {c.B, c.Hq, c.N, c.D})),
          k(random_tensor(rng, c.kv_dtype.value_or(c.dtype), Layout::bhnd, {c.B, c.Hkv, c.N, c.D}, 1.0f, c.kv_scales)),
          v(random_tensor(rng, c.kv_dtype.value_or(c.dtype), Layout::bhnd, {c.B, c.Hkv, c.N, c.D}, 1.0f, c.kv_scales)),
          lengths{static_cast<std::int32_t>(c.N - 9), static_cast<std::int32_t>(c.N)} {
        for (std::int64_t h = 0; h < c.Hq; ++h) {
            sinks.push_back(0.5f - 0.3f * static_cast<float>(h));
            slopes.push_back(0.1f + 0.05f * static_cast<float>(h));
        }
        std::bernoulli_distribution keep(0.8);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        bool_shape = {c.B, 1, c.N, c.N};
        float_shape = c.padding_mask ? std::vector<std::int64_t>{c.B, 1, 1, c.N} : std::vector<std::int64_t>{c.Hq, c.N, c.N};
        if (c.bool_mask) {
            allowed.resize(static_cast<std::size_t>(c.B * c.N * c.N));
            for (auto& a : allowed) a = keep(rng) ? 1 : 0;
        }
        if (c.float_mask || c.padding_mask) {
            std::int64_t elements = 1;
            for (const std::int64_t n : float_shape) elements *= n;
            added.resize(static_cast<std::size_t>(elements));
            for (auto& a : added) a = keep(rng) ? uniform(rng) : -std::numeric_limits<float>::infinity();
        }
        whole = {.q = q.view(), .k = k.view(), .v = v.view()};
        if (c.bool_mask) whole.bool_mask = MaskView{allowed.data(), bool_shape};
        if (!added.empty()) whole.float_mask = MaskView{added.data(), float_shape};
        if (c.lengths) whole.kv_lengths = lengths;
        whole.k_scale = whole.v_scale = c.kv_scales;
        if (c.sinks) whole.sinks = sinks;
        if (c.slopes) whole.alibi_slopes = slopes;
        const int P = ranks_of();
        std::vector<std::int64_t> shard_lengths = contiguous_lengths(c.N, P);
        if (c.sharding == Sharding::zigzag)
            for (int r = 0; r < P; ++r) {
                std::int64_t n = 0;
                for (const Segment& s : distributed::shard_segments(Sharding::zigzag, c.N, shard_lengths, r)) n += s.length;
                shard_lengths[static_cast<std::size_t>(r)] = n;
            }
        mine = distributed::shard_segments(c.sharding, c.N, shard_lengths, rank_of());
        q_shard = gather_rows(q, mine);
        k_shard = gather_rows(k, mine);
        v_shard = gather_rows(v, mine);
        shard = whole;
        shard.q = q_shard.view();
        shard.k = k_shard.view();
        shard.v = v_shard.view();
        if (c.bool_mask) {
            allowed_shard = mask_rows(allowed, bool_shape, mine, bool_shard_shape);
            shard.bool_mask = MaskView{allowed_shard.data(), bool_shard_shape};
        }
        if (!added.empty()) {
            added_shard = mask_rows(added, float_shape, mine, float_shard_shape);
            shard.float_mask = MaskView{added_shard.data(), float_shard_shape};
        }
    }
    RingData(const RingData&) = delete;  // the inputs point into the members

    // This rank's rows of a whole [B, H, N, D] tensor, as doubles in shard order.
    std::vector<double> rows_of(const HostTensor& t) const { return gather_rows(t, mine).doubles(); }
};

void expect_ring_equals_whole(const RingCase& c) {
    const int me = rank_of(), P = ranks_of();
    std::mt19937 rng(2024);  // the same whole on every rank
    const RingData data(c, rng);
    HostTensor want = nan_tensor(c.dtype, Layout::bhnd, {c.B, c.Hq, c.N, c.D});
    std::vector<float> want_lse(static_cast<std::size_t>(c.B * c.Hq * c.N));
    std::vector<float> want_weights(c.scores ? static_cast<std::size_t>(c.B * c.Hq * c.N * c.N) : 0), want_logits(want_weights.size());
    reference_attention(data.whole,
                        {.o = want.mutable_view(), .weights = c.scores ? want_weights.data() : nullptr, .lse = want_lse.data(),
                         .logits = c.scores ? want_logits.data() : nullptr},
                        c.options);

    const std::int64_t nq = data.q_shard.shape[2];
    HostTensor o = nan_tensor(c.dtype, Layout::bhnd, {c.B, c.Hq, nq, c.D});
    std::vector<float> lse(static_cast<std::size_t>(c.B * c.Hq * nq), NAN);
    std::vector<float> weights(c.scores ? static_cast<std::size_t>(c.B * c.Hq * nq * c.N) : 0, NAN), logits(weights.size(), NAN);
    const distributed::RingReport report = distributed::ring_attention(
        MPI_COMM_WORLD, context(), data.shard,
        {.o = o.mutable_view(), .weights = c.scores ? weights.data() : nullptr, .lse = lse.data(),
         .logits = c.scores ? logits.data() : nullptr},
        c.options, {.sharding = c.sharding, .timeout_s = 60});
    if (c.scores) {  // this rank's rows of the whole's [B, Hq, N, N] weights and logits
        std::vector<std::int64_t> shape;
        for (const auto& [got, whole, name] : {std::tuple{&weights, &want_weights, "weights"}, std::tuple{&logits, &want_logits, "logits"}}) {
            const std::vector<float> rows = mask_rows(*whole, {c.B, c.Hq, c.N, c.N}, data.mine, shape);
            const Comparison cmp = compare({got->begin(), got->end()}, {rows.begin(), rows.end()}, tolerance_for(DType::f32));
            INFO("rank " << me << ": " << name << ": " << cmp.message);
            CHECK(cmp.ok);
        }
    }
    CHECK(report.step_ms.size() == static_cast<std::size_t>(P));
    CHECK(report.blocks_run > 0);

    // The whole's rows of this shard.
    std::vector<double> want_l;
    for (std::int64_t b = 0; b < c.B; ++b)
        for (std::int64_t h = 0; h < c.Hq; ++h)
            for (const Segment& s : data.mine)
                for (std::int64_t i = s.first; i < s.first + s.length; ++i)
                    want_l.push_back(want_lse[static_cast<std::size_t>((b * c.Hq + h) * c.N + i)]);
    const Comparison co = compare(o.doubles(), data.rows_of(want), tolerance_for(c.dtype));
    const Comparison cl = compare_lse({lse.begin(), lse.end()}, want_l);
    INFO("rank " << me << " of " << P << ": o: " << co.message << "\nlse: " << cl.message);
    CHECK(co.ok);
    CHECK(cl.ok);
    CHECK(context().validation_messages().empty());
}

// The ring's forward then its backward, against the whole's reference gradients: this rank's rows
// of dq, dk and dv, and the sinks' gradient on every rank.
void expect_ring_gradients_equal_whole(const RingCase& c) {
    const int me = rank_of(), P = ranks_of();
    std::mt19937 rng(77);
    const RingData data(c, rng);
    const HostTensor grad_out = random_tensor(rng, c.dtype, Layout::bhnd, {c.B, c.Hq, c.N, c.D});
    HostTensor want_dq = nan_tensor(c.dtype, Layout::bhnd, data.q.shape), want_dk = nan_tensor(c.dtype, Layout::bhnd, data.k.shape),
               want_dv = nan_tensor(c.dtype, Layout::bhnd, data.v.shape);
    std::vector<float> want_d_sinks(static_cast<std::size_t>(c.Hq), NAN), want_d_mask(data.added.size(), NAN);
    const bool mask_grad = !data.added.empty();
    reference_attention_backward(data.whole, grad_out.view(),
                                 {.dq = want_dq.mutable_view(), .dk = want_dk.mutable_view(), .dv = want_dv.mutable_view(),
                                  .d_sinks = c.sinks ? want_d_sinks.data() : nullptr,
                                  .d_float_mask = mask_grad ? want_d_mask.data() : nullptr},
                                 c.options);

    const std::int64_t nq = data.q_shard.shape[2];
    HostTensor o = nan_tensor(c.dtype, Layout::bhnd, {c.B, c.Hq, nq, c.D});
    std::vector<float> lse(static_cast<std::size_t>(c.B * c.Hq * nq), NAN);
    const distributed::RingOptions ring{.sharding = c.sharding, .timeout_s = 60};
    distributed::ring_attention(MPI_COMM_WORLD, context(), data.shard, {.o = o.mutable_view(), .lse = lse.data()},
                                c.options, ring);
    const HostTensor grad_shard = gather_rows(grad_out, data.mine);
    HostTensor dq = nan_tensor(c.dtype, Layout::bhnd, data.q_shard.shape), dk = nan_tensor(c.dtype, Layout::bhnd, data.k_shard.shape),
               dv = nan_tensor(c.dtype, Layout::bhnd, data.v_shard.shape);
    std::vector<float> d_sinks(static_cast<std::size_t>(c.Hq), NAN), d_mask(data.added_shard.size(), NAN);
    const distributed::RingReport report = distributed::ring_attention_backward(
        MPI_COMM_WORLD, context(), data.shard, o.view(), lse, grad_shard.view(),
        {.dq = dq.mutable_view(), .dk = dk.mutable_view(), .dv = dv.mutable_view(),
         .d_sinks = c.sinks ? d_sinks.data() : nullptr, .d_float_mask = mask_grad ? d_mask.data() : nullptr},
        c.options, ring);
    CHECK(report.step_ms.size() == static_cast<std::size_t>(P));
    CHECK(report.blocks_run > 0);
    CHECK(report.flops > 0);

    const Tolerance tol = gradient_tolerance_for(c.dtype);
    for (const auto& [got, want, name] : {std::tuple{&dq, &want_dq, "dq"}, std::tuple{&dk, &want_dk, "dk"},
                                          std::tuple{&dv, &want_dv, "dv"}}) {
        const Comparison cmp = compare(got->doubles(), data.rows_of(*want), tol);
        INFO("rank " << me << " of " << P << ": " << name << ": " << cmp.message);
        CHECK(cmp.ok);
    }
    if (c.sinks) {
        const Comparison cmp = compare({d_sinks.begin(), d_sinks.end()}, {want_d_sinks.begin(), want_d_sinks.end()}, tol);
        INFO("rank " << me << ": d_sinks: " << cmp.message);
        CHECK(cmp.ok);
    }
    if (mask_grad) {
        // The gradient of this rank's mask: its rows of the whole's, or, for a mask broadcast over
        // the rows, its share of the whole's sum (the ranks' shares add up to it).
        std::vector<std::int64_t> shape;
        std::vector<float> want = mask_rows(want_d_mask, data.float_shape, data.mine, shape);
        if (c.padding_mask) MPI_Allreduce(MPI_IN_PLACE, d_mask.data(), static_cast<int>(d_mask.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        const Comparison cmp = compare({d_mask.begin(), d_mask.end()}, {want.begin(), want.end()}, tol);
        INFO("rank " << me << ": d_float_mask: " << cmp.message);
        CHECK(cmp.ok);
    }
    CHECK(context().validation_messages().empty());
}

// Every feature the ring keeps the whole's meaning of.
using Setup = std::function<void(RingCase&)>;
const std::vector<std::pair<const char*, Setup>>& ring_cases() {
    static const std::vector<std::pair<const char*, Setup>> cases{
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
        {"bool and float masks, bottom-right causal", [](RingCase& c) {
             c.bool_mask = c.float_mask = true;
             c.options.causal = Causal::bottom_right;
         }},
        {"key padding float mask (broadcast over rows), three stages", [](RingCase& c) {
             c.padding_mask = true;
             c.options.impl = Impl::unfused;
         }},
        {"MQA, fused kernels forced", [](RingCase& c) {
             c.Hkv = 1;
             c.options.impl = Impl::fused;
         }},
    };
    return cases;
}

// Every case of ring_cases() in both shardings.
void for_each_ring_case(const std::function<void(const RingCase&)>& expect) {
    for (const Sharding sharding : {Sharding::contiguous, Sharding::zigzag})
        for (const auto& [name, setup] : ring_cases()) {
            INFO(name << (sharding == Sharding::zigzag ? ", zigzag" : ", contiguous"));
            RingCase c;
            c.sharding = sharding;
            setup(c);
            expect(c);
        }
}

}  // namespace

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

static HostTensor good_of(std::mt19937& rng);
static HostTensor o16_of();

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

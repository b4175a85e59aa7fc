// Ring attention's test cases: the whole inputs and this rank's shard of them, and the checks of a
// rank's outputs and gradients against the whole call's reference (ring_cases.hpp).
#include "distributed/ring_cases.hpp"

#include <algorithm>
#include <array>

namespace vkattn::ring_test {
namespace {

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

// Every feature the ring keeps the whole's meaning of.
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

}  // namespace

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

RingData::RingData(const RingCase& c, std::mt19937& rng)
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

}  // namespace vkattn::ring_test

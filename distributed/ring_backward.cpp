// The ring's backward (vkattn/distributed.hpp), as ring-flash-attention runs it: the K/V shards
// travel the ring as in the forward; each step a rank computes, on the device, the gradients of its
// queries and of the K/V shard it holds for every visible (query segment, key segment) pair, keeps
// dQ, and adds the held shard's dK/dV to the accumulator that follows that shard round the ring one
// step behind it, arriving home after the last step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "attention/problem.hpp"
#include "collective.hpp"
#include "device_shard.hpp"
#include "ring_backward_checks.hpp"
#include "reference/tensor_access.hpp"
#include "ring_setup.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/distributed.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::distributed {
namespace {

using detail::Clock;
using detail::ms_since;

// The bytes of the first `elements` floats of a buffer, to send or receive.
std::span<std::uint8_t> bytes_of(std::vector<float>& values, std::int64_t elements) {
    return {reinterpret_cast<std::uint8_t*>(values.data()), static_cast<std::size_t>(elements) * sizeof(float)};
}

// One (query segment, key segment) pair's gradients: on the device, and downloaded (storage type).
struct PairGradients {
    DeviceTensor dq, dk, dv;
    std::vector<std::uint8_t> dq_host, dk_host, dv_host;
};

// What decides who talks to whom: the dK/dV accumulators travel, the sinks' gradient is summed.
detail::CallFlags call_flags(const AttentionGradients& grads) {
    return {{grads.dk.data != nullptr, "whether dk and dv are asked for"},
            {grads.d_sinks != nullptr, "whether d_sinks is asked for"}};
}

// The backward on the device: q, o and grad_out on the device, `shard`, `o`, `lse` and `grad_out`
// the same in host memory (checks, masks' parts, K/V transfers, the sinks' gradient).
RingReport run_backward(Context& context, const detail::RingSetup& setup, const AttentionInputs& shard,
                        const TensorView& o, std::span<const float> lse, const TensorView& grad_out,
                        const AttentionGradients& grads, const DeviceTensor& q, const DeviceTensor& o_rows,
                        const DeviceTensor& grad_rows, const AttentionOptions& options, const RingOptions& ring) {
    const std::int64_t B = shard.q.shape[0], Hq = shard.q.shape[1], nq = shard.q.shape[2], Dk = shard.q.shape[3];
    const std::int64_t Hkv = shard.k.shape[1], Dv = shard.v.shape[3];
    const bool want_dq = grads.dq.data != nullptr, want_kv = grads.dk.data != nullptr;
    const bool want_d_mask = grads.d_float_mask != nullptr;
    const int P = setup.P, me = setup.me;
    detail::KvRing kv(setup, shard.k, shard.v);
    RingReport report;
    report.ranks = P;

    // On the device for the whole ring: this rank's q, o, grad_out and key lengths, and the forward's
    // lse of each query segment (the backward takes it contiguous); the held K/V, filled each step.
    DeviceTensor lengths;
    if (!shard.kv_lengths.empty())
        lengths = DeviceTensor::from_host(
            context, make_view(static_cast<const void*>(shard.kv_lengths.data()), DType::i32, Layout::bhnd, {1, 1, 1, B}));
    std::vector<DeviceTensor> lse_rows;
    for (std::int64_t q_local = 0; const Segment& qs : setup.q_segments) {
        std::vector<float> part;
        for (std::int64_t bh = 0; bh < B * Hq; ++bh)
            part.insert(part.end(), lse.begin() + bh * nq + q_local, lse.begin() + bh * nq + q_local + qs.length);
        lse_rows.push_back(DeviceTensor::from_host(
            context, make_view(static_cast<const void*>(part.data()), DType::f32, Layout::bhnd, {B, Hq, qs.length, 1})));
        q_local += qs.length;
    }
    const std::int64_t most = *std::max_element(setup.k_rows.begin(), setup.k_rows.end());
    const DeviceTensor k_held = DeviceTensor::empty(context, shard.k.dtype, {B, Hkv, most, Dk});
    const DeviceTensor v_held = DeviceTensor::empty(context, shard.v.dtype, {B, Hkv, most, Dv});
    std::vector<PairGradients> pairs;  // one per pair of a step, kept across steps

    // dQ accumulated here; the held shard's dK/dV in fp32: this step's part, the accumulator
    // arriving from the previous rank, and the one leaving for the next.
    std::vector<double> dq(want_dq ? static_cast<std::size_t>(B * Hq * nq * Dk) : 0);
    std::vector<double> d_mask;  // the float mask's gradient, its own shape
    if (want_d_mask) {
        std::int64_t elements = 1;
        for (const std::int64_t n : shard.float_mask->shape) elements *= n;
        d_mask.assign(static_cast<std::size_t>(elements), 0.0);
    }
    const auto kv_elements = [&](std::int64_t rows, std::int64_t D) { return B * Hkv * rows * D; };
    // Shared with TransferProgress, which keeps them if a step ends with transfers pending.
    struct Accumulators {
        std::vector<float> dk_part, dv_part, dk_in, dv_in, dk_out, dv_out;
    };
    const auto accumulators = std::make_shared<Accumulators>();
    auto& [dk_part, dv_part, dk_in, dv_in, dk_out, dv_out] = *accumulators;
    if (want_kv)
        for (auto* buffer : {&dk_part, &dk_in, &dk_out, &dv_part, &dv_in, &dv_out})
            buffer->resize(static_cast<std::size_t>(kv_elements(most, buffer == &dk_part || buffer == &dk_in || buffer == &dk_out ? Dk : Dv)));

    setup.comm_owner->quiet = false;  // until the last transfer and the sinks' sum have completed
    for (int s = 0; s < P; ++s) {
        const auto start = Clock::now();
        const int holder = setup.holder(s);
        const std::int64_t held = setup.k_rows[static_cast<std::size_t>(holder)];
        std::vector<MPI_Request> requests;
        kv.post(s, requests, report.bytes_sent);
        if (want_kv && s > 0) {  // the previous step's shard's accumulator on; the held shard's in
            const std::int64_t leaving = setup.k_rows[static_cast<std::size_t>(setup.holder(s - 1))];
            detail::post_exchange(setup, s, detail::Carried::dk, bytes_of(dk_out, kv_elements(leaving, Dk)),
                                  bytes_of(dk_in, kv_elements(held, Dk)), requests, report.bytes_sent);
            detail::post_exchange(setup, s, detail::Carried::dv, bytes_of(dv_out, kv_elements(leaving, Dv)),
                                  bytes_of(dv_in, kv_elements(held, Dv)), requests, report.bytes_sent);
        }
        detail::TransferProgress progress(requests, ring.timeout_s, {kv.buffers(), accumulators});
        const auto compute_start = Clock::now();

        // Every visible pair's backward in one submission.
        Batch batch(context);
        batch.upload(k_held.seq(0, held), kv.k(s));
        batch.upload(v_held.seq(0, held), kv.v(s));
        struct Ran {
            std::size_t pair;
            std::int64_t q_local, k_local;
            Segment qs, ks;
            std::array<vkattn::detail::Extent, 4> mask_box;
            DeviceAttentionInputs in;  // its masks' parts, alive until the submission ends
            DeviceTensor d_mask;
            std::vector<float> d_mask_host;
        };
        std::vector<Ran> ran;
        std::int64_t q_local = 0;
        for (std::size_t qi = 0; qi < setup.q_segments.size(); ++qi) {
            const Segment& qs = setup.q_segments[qi];
            std::int64_t k_local = 0;
            for (const Segment& ks : setup.key_segments(holder)) {
                const detail::PairInputs pair(setup, shard, kv.k(s), kv.v(s), q_local, qs, k_local, ks);
                const AttentionInputs& host = pair.in;
                const AttentionOptions block = setup.block_options(options, qs, ks);
                std::uint32_t unused = 0;
                const AttentionOutputs stand_in{
                    .o = make_view(static_cast<void*>(&unused), shard.q.dtype, Layout::bhnd, {B, Hq, qs.length, Dv})};
                if (qs.length == 0 || ks.length == 0 || (!want_dq && !want_kv && !want_d_mask) ||
                    vkattn::detail::resolve(host, stand_in, block).visible_pairs() == 0) {
                    ++report.blocks_skipped;
                    k_local += ks.length;
                    continue;
                }
                const std::size_t slot = ran.size();
                if (slot == pairs.size()) pairs.emplace_back();
                PairGradients& g = pairs[slot];
                // Sized for the largest segments any step brings.
                if (want_dq && (!g.dq.defined() || g.dq.shape()[2] < qs.length))
                    g.dq = DeviceTensor::empty(context, shard.q.dtype, {B, Hq, qs.length, Dk});
                if (want_kv && (!g.dk.defined() || g.dk.shape()[2] < ks.length)) {
                    g.dk = DeviceTensor::empty(context, shard.k.dtype, {B, Hkv, ks.length, Dk});
                    g.dv = DeviceTensor::empty(context, shard.v.dtype, {B, Hkv, ks.length, Dv});
                }
                Ran r{.pair = slot, .q_local = q_local, .k_local = k_local, .qs = qs, .ks = ks, .mask_box = pair.mask_box,
                      .in = detail::device_inputs(context, pair, q.seq(q_local, qs.length), k_held.seq(k_local, ks.length),
                                                  v_held.seq(k_local, ks.length), lengths)};
                if (want_d_mask) {
                    r.d_mask = DeviceTensor::empty(context, DType::f32, r.in.float_mask.shape());
                    r.d_mask_host.resize(pair.float_mask.size());
                }
                const DeviceAttentionInputs& in = r.in;
                const DeviceAttentionGradients out{.dq = want_dq ? g.dq.seq(0, qs.length) : DeviceTensor{},
                                                   .dk = want_kv ? g.dk.seq(0, ks.length) : DeviceTensor{},
                                                   .dv = want_kv ? g.dv.seq(0, ks.length) : DeviceTensor{},
                                                   .d_float_mask = r.d_mask};
                report.flops += attention_backward(batch, in, o_rows.seq(q_local, qs.length), lse_rows[qi],
                                                   grad_rows.seq(q_local, qs.length), out, block)
                                    .flops;
                if (want_dq) batch.download(out.dq, detail::host_buffer(g.dq_host, shard.q.dtype, out.dq.shape()));
                if (want_kv) {
                    batch.download(out.dk, detail::host_buffer(g.dk_host, shard.k.dtype, out.dk.shape()));
                    batch.download(out.dv, detail::host_buffer(g.dv_host, shard.v.dtype, out.dv.shape()));
                }
                if (want_d_mask)
                    batch.download(r.d_mask, make_view(static_cast<void*>(r.d_mask_host.data()), DType::f32, Layout::bhnd,
                                                       r.d_mask.shape()));
                ran.push_back(std::move(r));
                ++report.blocks_run;
                k_local += ks.length;
            }
            q_local += qs.length;
        }
        batch.submit().wait();

        // Sum the pairs: dQ into this rank's rows, dK/dV into the held shard's part.
        if (want_kv) {
            std::fill(dk_part.begin(), dk_part.end(), 0.0f);
            std::fill(dv_part.begin(), dv_part.end(), 0.0f);
        }
        for (const Ran& r : ran) {
            if (want_d_mask) {  // the part's gradient added back where the part came from
                const float* part = r.d_mask_host.data();
                vkattn::detail::for_each_part_row(shard.float_mask->shape, r.mask_box, [&](std::int64_t first, std::int64_t count) {
                    for (std::int64_t x = 0; x < count; ++x) d_mask[static_cast<std::size_t>(first + x)] += *part++;
                });
            }
            const PairGradients& g = pairs[r.pair];
            for (std::int64_t b = 0; b < B; ++b) {
                if (want_dq)
                    for (std::int64_t h = 0; h < Hq; ++h)
                        for (std::int64_t i = 0; i < r.qs.length; ++i)
                            for (std::int64_t e = 0; e < Dk; ++e)
                                dq[static_cast<std::size_t>(((b * Hq + h) * nq + r.q_local + i) * Dk + e)] +=
                                    load_element(g.dq_host.data(), shard.q.dtype, ((b * Hq + h) * r.qs.length + i) * Dk + e);
                if (want_kv)
                    for (std::int64_t h = 0; h < Hkv; ++h)
                        for (std::int64_t j = 0; j < r.ks.length; ++j) {
                            const std::int64_t from = (b * Hkv + h) * r.ks.length + j, to = (b * Hkv + h) * held + r.k_local + j;
                            for (std::int64_t e = 0; e < Dk; ++e)
                                dk_part[static_cast<std::size_t>(to * Dk + e)] +=
                                    static_cast<float>(load_element(g.dk_host.data(), shard.k.dtype, from * Dk + e));
                            for (std::int64_t e = 0; e < Dv; ++e)
                                dv_part[static_cast<std::size_t>(to * Dv + e)] +=
                                    static_cast<float>(load_element(g.dv_host.data(), shard.v.dtype, from * Dv + e));
                        }
            }
        }
        detail::finish_compute(report, progress, compute_start);
        // The accumulator leaving in the next step: what arrived plus this rank's part.
        if (want_kv)
            for (auto [out, in, part, D] : {std::tuple{&dk_out, &dk_in, &dk_part, Dk}, std::tuple{&dv_out, &dv_in, &dv_part, Dv}})
                for (std::int64_t x = 0; x < kv_elements(held, D); ++x) {
                    const auto at = static_cast<std::size_t>(x);
                    (*out)[at] = (s > 0 ? (*in)[at] : 0.0f) + (*part)[at];
                }
        report.step_ms.push_back(ms_since(start));
    }

    // Home: the last step's accumulator is the next rank's finished dK/dV; this rank's comes from
    // the previous one.
    if (want_kv && P > 1) {
        const auto start = Clock::now();
        const std::int64_t leaving = setup.k_rows[static_cast<std::size_t>(setup.holder(P - 1))];
        const std::int64_t mine = setup.k_rows[static_cast<std::size_t>(me)];
        std::vector<MPI_Request> requests;
        detail::post_exchange(setup, P, detail::Carried::dk, bytes_of(dk_out, kv_elements(leaving, Dk)),
                              bytes_of(dk_in, kv_elements(mine, Dk)), requests, report.bytes_sent);
        detail::post_exchange(setup, P, detail::Carried::dv, bytes_of(dv_out, kv_elements(leaving, Dv)),
                              bytes_of(dv_in, kv_elements(mine, Dv)), requests, report.bytes_sent);
        detail::TransferProgress progress(requests, ring.timeout_s, {accumulators});
        const double waited = progress.finish().transfer_ms;
        report.wait_ms += waited;
        report.transfer_ms += waited;
        report.step_ms.back() += ms_since(start);
        std::swap(dk_out, dk_in);
        std::swap(dv_out, dv_in);
    }

    // The sinks' gradient, −Σ_i e^(sink − lse_i)·(dO_i·O_i) over every query row (the lse holds the
    // sink), summed over the ranks.
    if (grads.d_sinks) {
        const auto summed = std::make_shared<std::pair<std::vector<double>, std::vector<double>>>();
        std::vector<double>& d_sinks = summed->first;  // plain references: a lambda below uses them
        std::vector<double>& total = summed->second;
        d_sinks.assign(static_cast<std::size_t>(Hq), 0.0);
        total.resize(d_sinks.size());
        for (std::int64_t h = 0; h < Hq; ++h) {
            const float sink = shard.sinks[static_cast<std::size_t>(h)];
            if (sink == -std::numeric_limits<float>::infinity()) continue;
            for (std::int64_t b = 0; b < B; ++b)
                for (std::int64_t i = 0; i < nq; ++i) {
                    const double row_lse = lse[static_cast<std::size_t>((b * Hq + h) * nq + i)];
                    if (row_lse == -std::numeric_limits<double>::infinity()) continue;
                    double delta = 0.0;
                    for (std::int64_t e = 0; e < Dv; ++e)
                        delta += vkattn::detail::load(grad_out, b, h, i, e) * vkattn::detail::load(o, b, h, i, e);
                    d_sinks[static_cast<std::size_t>(h)] -= std::exp(sink - row_lse) * delta;
                }
        }
        detail::bounded_collective(
            [&](MPI_Request* r) {
                return MPI_Iallreduce(d_sinks.data(), total.data(), static_cast<int>(Hq), MPI_DOUBLE, MPI_SUM, setup.comm, r);
            },
            summed, ring.timeout_s, "summing the sinks' gradient");
        for (std::int64_t h = 0; h < Hq; ++h) grads.d_sinks[h] = static_cast<float>(total[static_cast<std::size_t>(h)]);
    }
    setup.comm_owner->quiet = true;
    for (std::size_t x = 0; x < d_mask.size(); ++x) grads.d_float_mask[x] = static_cast<float>(d_mask[x]);
    for (std::int64_t b = 0; b < B; ++b) {
        if (want_dq)
            for (std::int64_t h = 0; h < Hq; ++h)
                for (std::int64_t i = 0; i < nq; ++i)
                    for (std::int64_t e = 0; e < Dk; ++e)
                        vkattn::detail::store(grads.dq, b, h, i, e, dq[static_cast<std::size_t>(((b * Hq + h) * nq + i) * Dk + e)]);
        if (want_kv)
            for (std::int64_t h = 0; h < Hkv; ++h)
                for (std::int64_t j = 0; j < shard.k.shape[2]; ++j) {
                    const std::int64_t row = (b * Hkv + h) * shard.k.shape[2] + j;
                    for (std::int64_t e = 0; e < Dk; ++e)
                        vkattn::detail::store(grads.dk, b, h, j, e, dk_out[static_cast<std::size_t>(row * Dk + e)]);
                    for (std::int64_t e = 0; e < Dv; ++e)
                        vkattn::detail::store(grads.dv, b, h, j, e, dv_out[static_cast<std::size_t>(row * Dv + e)]);
                }
    }
    return report;
}

}  // namespace

RingReport ring_attention_backward(MPI_Comm comm, Context& context, const AttentionInputs& shard, const TensorView& o,
                                   std::span<const float> lse, const TensorView& grad_out, const AttentionGradients& grads,
                                   const AttentionOptions& options, const RingOptions& ring) {
    const detail::RingSetup setup = detail::prepare(
        comm, shard, options, ring,
        [&](const detail::RingSetup& r, const AttentionInputs& first, const AttentionOptions& block) {
            detail::check_backward_call(r, first, block, shard, o, lse, grad_out, grads);
        },
        call_flags(grads));
    return run_backward(context, setup, shard, o, lse, grad_out, grads, DeviceTensor::from_host(context, shard.q),
                        DeviceTensor::from_host(context, o), DeviceTensor::from_host(context, grad_out), options, ring);
}

RingReport ring_attention_backward(MPI_Comm comm, Context& context, const DeviceAttentionInputs& shard, const DeviceTensor& o,
                                   const DeviceTensor& lse, const DeviceTensor& grad_out, const DeviceAttentionGradients& grads,
                                   const AttentionOptions& options, const RingOptions& ring) {
    // Host copies of the inputs (checks, masks, K/V transfers, the sinks' gradient) and host buffers
    // for the gradients, uploaded at the end; an error here is thrown inside the agreement.
    const detail::HostShard host(shard);
    std::exception_ptr early = host.error;
    detail::HostCopy o_host, grad_host, lse_host;
    std::vector<std::uint8_t> dq_bytes, dk_bytes, dv_bytes;
    std::vector<float> d_sinks, d_mask;
    AttentionGradients out;
    try {
        for (const auto& [t, name] : {std::pair{&o, "o"}, std::pair{&lse, "lse"}, std::pair{&grad_out, "grad_out"}})
            if (!t->defined()) throw InvalidArgument(name, "the tensor is empty.");
        if (lse.dtype() != DType::f32 || !lse.contiguous())
            throw InvalidArgument("lse", "must be f32 and contiguous, [B, Hq, n_q, 1] (the forward's).");
        o_host = detail::HostCopy(o);
        grad_host = detail::HostCopy(grad_out);
        lse_host = detail::HostCopy(lse);
        for (const auto& [t, bytes, view] : {std::tuple{&grads.dq, &dq_bytes, &out.dq}, std::tuple{&grads.dk, &dk_bytes, &out.dk},
                                             std::tuple{&grads.dv, &dv_bytes, &out.dv}})
            if (t->defined()) *view = detail::host_buffer(*bytes, t->dtype(), t->shape());
        if (grads.d_sinks.defined()) {
            if (grads.d_sinks.dtype() != DType::f32 || grads.d_sinks.elements() != shard.q.shape()[1])
                throw InvalidArgument("d_sinks", "must be f32 with Hq = " + std::to_string(shard.q.shape()[1]) + " elements.");
            d_sinks.resize(static_cast<std::size_t>(grads.d_sinks.elements()));
            out.d_sinks = d_sinks.data();
        }
        if (grads.d_float_mask.defined()) {
            if (!shard.float_mask.defined() || grads.d_float_mask.dtype() != DType::f32 ||
                grads.d_float_mask.shape() != shard.float_mask.shape())
                throw InvalidArgument("d_float_mask", "must be f32 of the float mask's shape.");
            d_mask.resize(static_cast<std::size_t>(grads.d_float_mask.elements()));
            out.d_float_mask = d_mask.data();
        }
    } catch (...) {
        if (!early) early = std::current_exception();
    }
    const std::span<const float> lse_values(static_cast<const float*>(lse_host.view.data),
                                            lse_host.view.data ? static_cast<std::size_t>(lse.elements()) : 0);
    const detail::RingSetup setup = detail::prepare(
        comm, host.inputs, options, ring,
        [&](const detail::RingSetup& r, const AttentionInputs& first, const AttentionOptions& block) {
            detail::check_backward_call(r, first, block, host.inputs, o_host.view, lse_values, grad_host.view, out);
        },
        call_flags(out), early);
    const RingReport report = run_backward(context, setup, host.inputs, o_host.view, lse_values, grad_host.view, out,
                                           shard.q, o, grad_out, options, ring);
    for (const auto& [t, view] : {std::pair{&grads.dq, &out.dq}, std::pair{&grads.dk, &out.dk}, std::pair{&grads.dv, &out.dv}})
        if (t->defined()) t->upload(detail::read_only(*view));
    if (grads.d_sinks.defined())
        grads.d_sinks.upload(make_view(static_cast<const void*>(d_sinks.data()), DType::f32, Layout::bhnd, grads.d_sinks.shape()));
    if (grads.d_float_mask.defined())
        grads.d_float_mask.upload(make_view(static_cast<const void*>(d_mask.data()), DType::f32, Layout::bhnd,
                                            grads.d_float_mask.shape()));
    return report;
}

}  // namespace vkattn::distributed

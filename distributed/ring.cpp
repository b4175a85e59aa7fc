// Ring attention (vkattn/distributed.hpp): the K/V shards travel round the ranks while each rank
// attends its queries to the one it holds; partial (o, lse) merged by their log-sum-exp.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <span>

#include "attention/path.hpp"
#include "attention/problem.hpp"
#include "collective.hpp"
#include "device_shard.hpp"
#include "reference/tensor_access.hpp"
#include "ring_setup.hpp"
#include "vkattn/distributed.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::distributed {
namespace {

using detail::Clock;
using detail::ms_since;

// This rank's rows after the ring: o (normalised) and its log-sum-exp, sinks joined.
struct Merged {
    std::vector<double> o, lse;
    // Asked for: this rank's rows of the weights and logits over the whole's keys, dense f32
    // [B, Hq, n_q, Nkv] (empty when not).
    std::vector<float> weights, logits;
};

// A pair's weights, normalised by its own log-sum-exp until the merge knows the row's.
struct WeightBlock {
    std::int64_t q_local, rows, key, keys;
    std::vector<float> lse;
};

// The forward on the device: `q` on the device, `host` the same shard in host memory (checks, the
// masks' parts, the K/V shards packed for MPI). Each step's held K/V shard is uploaded once; each
// visible pair is one attention call on device tensors, its partial (o, lse) merged on the host.
RingReport run_forward(Context& context, const detail::RingSetup& setup, const AttentionInputs& host,
                       const DeviceTensor& q, const AttentionOptions& options, const RingOptions& ring, Merged& merged) {
    const int P = setup.P;
    const std::int64_t B = host.q.shape[0], Hq = host.q.shape[1], Hkv = host.k.shape[1], nq = host.q.shape[2];
    const std::int64_t Dv = host.v.shape[3];
    detail::KvRing kv(setup, host.k, host.v);
    const std::int64_t most = *std::max_element(setup.k_rows.begin(), setup.k_rows.end());
    const DeviceTensor k_held = DeviceTensor::empty(context, host.k.dtype, {B, Hkv, most, host.k.shape[3]});
    const DeviceTensor v_held = DeviceTensor::empty(context, host.v.dtype, {B, Hkv, most, Dv});
    DeviceTensor lengths;
    if (!host.kv_lengths.empty()) lengths = detail::device_array(context, host.kv_lengths.data(), DType::i32, {B});

    // The running merge per query row: o normalised to the running lse m.
    const auto n_rows = static_cast<std::size_t>(B * Hq * nq);
    std::vector<double>& acc = merged.o;
    std::vector<double>& m = merged.lse;
    acc.assign(n_rows * static_cast<std::size_t>(Dv), 0.0);
    m.assign(n_rows, -std::numeric_limits<double>::infinity());
    const bool want_weights = !merged.weights.empty(), want_logits = !merged.logits.empty();
    const std::int64_t Nkv = setup.Nkv;
    std::vector<WeightBlock> weight_blocks;
    std::vector<float> block_scores;  // a pair's weights or logits, [B, Hq, rows, keys]
    // A pair's [B, Hq, rows, keys] scores into this rank's rows over the whole's keys.
    auto place = [&](std::vector<float>& to, std::int64_t q_local, std::int64_t rows, std::int64_t key, std::int64_t keys) {
        for (std::int64_t bh = 0; bh < B * Hq; ++bh)
            for (std::int64_t i = 0; i < rows; ++i)
                std::copy_n(block_scores.begin() + (bh * rows + i) * keys, keys,
                            to.begin() + ((bh * nq + q_local + i) * Nkv + key));
    };
    std::vector<std::uint8_t> o_part;
    std::vector<float> lse_part;
    std::map<std::pair<std::int64_t, std::int64_t>, DeviceAttentionOutputs> pair_outputs;  // by (rows, keys)
    RingReport report;
    report.ranks = P;
    setup.comm_owner->quiet = false;  // until every step's transfer has completed
    for (int s = 0; s < P; ++s) {
        const auto start = Clock::now();
        std::vector<MPI_Request> requests;
        kv.post(s, requests, report.bytes_sent);
        detail::TransferProgress progress(requests, ring.timeout_s, {kv.buffers()});
        const auto compute_start = Clock::now();
        const std::int64_t held = setup.k_rows[static_cast<std::size_t>(setup.holder(s))];
        k_held.seq(0, held).upload(kv.k(s));
        v_held.seq(0, held).upload(kv.v(s));
        // The step's compute: every (query segment, key segment) pair with a visible key.
        std::int64_t q_local = 0;
        for (const Segment& qs : setup.q_segments) {
            std::int64_t k_local = 0;
            for (const Segment& ks : setup.key_segments(setup.holder(s))) {
                const detail::PairInputs pair(setup, host, kv.k(s), kv.v(s), q_local, qs, k_local, ks);
                const AttentionOptions block = setup.block_options(options, qs, ks);
                const MutableTensorView o_view = detail::host_buffer(o_part, host.q.dtype, {B, Hq, qs.length, Dv});
                lse_part.resize(static_cast<std::size_t>(B * Hq * qs.length));
                const std::int64_t k_first = k_local;
                k_local += ks.length;
                // Logits are defined at hidden keys too (scaled, softcapped): their pairs all run.
                if (qs.length == 0 || ks.length == 0 ||
                    (!want_logits &&
                     vkattn::detail::resolve(pair.in, {.o = o_view, .lse = lse_part.data()}, block).visible_pairs() == 0)) {
                    ++report.blocks_skipped;
                    continue;
                }
                const DeviceAttentionInputs in = detail::device_inputs(
                    context, pair, q.seq(q_local, qs.length), k_held.seq(k_first, ks.length), v_held.seq(k_first, ks.length), lengths);
                const std::array<std::int64_t, 4> scores_shape{B, Hq, qs.length, ks.length};
                // A pair's outputs, made once per shape: pairs of equal segment lengths recur every step.
                auto [made, fresh] = pair_outputs.try_emplace({qs.length, ks.length});
                if (fresh)
                    made->second = {
                        .o = DeviceTensor::empty(context, host.q.dtype, o_view.shape),
                        .weights = want_weights ? DeviceTensor::empty(context, DType::f32, scores_shape) : DeviceTensor{},
                        .lse = DeviceTensor::empty(context, DType::f32, {B, Hq, qs.length, 1}),
                        .logits = want_logits ? DeviceTensor::empty(context, DType::f32, scores_shape) : DeviceTensor{}};
                const DeviceAttentionOutputs& part = made->second;
                report.flops += attention(context, in, part, block).flops;
                ++report.blocks_run;
                part.o.download(o_view);
                part.lse.download(make_view(static_cast<void*>(lse_part.data()), DType::f32, Layout::bhnd, part.lse.shape()));
                const MutableTensorView scores =
                    make_view(static_cast<void*>((block_scores.resize(static_cast<std::size_t>(B * Hq * qs.length * ks.length)),
                                                  block_scores.data())),
                              DType::f32, Layout::bhnd, scores_shape);
                if (want_logits) {
                    part.logits.download(scores);
                    place(merged.logits, q_local, qs.length, ks.first, ks.length);
                }
                if (want_weights) {
                    part.weights.download(scores);
                    place(merged.weights, q_local, qs.length, ks.first, ks.length);
                    weight_blocks.push_back({q_local, qs.length, ks.first, ks.length, lse_part});
                }
                // Merge: acc·e^m + o_s·e^lse_s, renormalised to the new running lse.
                for (std::int64_t b = 0; b < B; ++b)
                    for (std::int64_t h = 0; h < Hq; ++h)
                        for (std::int64_t i = 0; i < qs.length; ++i) {
                            const auto p = static_cast<std::size_t>((b * Hq + h) * qs.length + i);
                            const double ls = lse_part[p];
                            if (ls == -std::numeric_limits<double>::infinity()) continue;  // no key in this block
                            const auto row = static_cast<std::size_t>((b * Hq + h) * nq + q_local + i);
                            const double mm = std::max(m[row], ls);
                            const double old_scale = std::exp(m[row] - mm), new_scale = std::exp(ls - mm);
                            const double sum = old_scale + new_scale, keep = old_scale / sum, add = new_scale / sum;
                            for (std::int64_t e = 0; e < Dv; ++e) {
                                double& a = acc[row * static_cast<std::size_t>(Dv) + static_cast<std::size_t>(e)];
                                a = a * keep + add * load_element(o_part.data(), host.q.dtype, static_cast<std::int64_t>(p) * Dv + e);
                            }
                            m[row] = mm + std::log(sum);
                        }
            }
            q_local += qs.length;
        }
        detail::finish_compute(report, progress, compute_start);
        report.step_ms.push_back(ms_since(start));
    }

    setup.comm_owner->quiet = true;
    // The sinks join each row's denominator once (below); each pair's weights, normalised by its own
    // log-sum-exp, rescaled to the row's: w · e^(lse_pair − lse).
    auto final_lse = [&](std::size_t row) {
        const std::int64_t h = static_cast<std::int64_t>(row / static_cast<std::size_t>(nq)) % Hq;
        if (host.sinks.empty() || host.sinks[static_cast<std::size_t>(h)] == -INFINITY) return m[row];
        const double sink = host.sinks[static_cast<std::size_t>(h)], mm = std::max(m[row], sink);
        return mm + std::log(std::exp(m[row] - mm) + std::exp(sink - mm));
    };
    for (const WeightBlock& w : weight_blocks)
        for (std::int64_t bh = 0; bh < B * Hq; ++bh)
            for (std::int64_t i = 0; i < w.rows; ++i) {
                const auto row = static_cast<std::size_t>(bh * nq + w.q_local + i);
                const double pair_lse = w.lse[static_cast<std::size_t>(bh * w.rows + i)];
                const double scale = pair_lse == -INFINITY ? 0.0 : std::exp(pair_lse - final_lse(row));
                float* first = merged.weights.data() + (static_cast<std::int64_t>(row) * Nkv + w.key);
                for (std::int64_t j = 0; j < w.keys; ++j)  // a pair with no visible key weighs 0, whatever it wrote
                    first[j] = scale == 0.0 ? 0.0f : static_cast<float>(first[j] * scale);
            }
    // The sinks join each row's denominator once.
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h) {
            if (host.sinks.empty() || host.sinks[static_cast<std::size_t>(h)] == -INFINITY) continue;
            const double sink = host.sinks[static_cast<std::size_t>(h)];
            for (std::int64_t i = 0; i < nq; ++i) {
                const auto row = static_cast<std::size_t>((b * Hq + h) * nq + i);
                const double mm = std::max(m[row], sink);
                const double total = mm + std::log(std::exp(m[row] - mm) + std::exp(sink - mm));
                const double scale = std::exp(m[row] - total);
                for (std::int64_t e = 0; e < Dv; ++e) acc[row * static_cast<std::size_t>(Dv) + static_cast<std::size_t>(e)] *= scale;
                m[row] = total;
            }
        }
    return report;
}

// The forward's own checks (beyond prepare's): o of this rank's shape, no weights or logits.
void check_outputs(const detail::RingSetup& r, const AttentionInputs& first, const AttentionOptions& block,
                   const AttentionInputs& shard, DType o_dtype, const std::array<std::int64_t, 4>& o_shape, bool weights,
                   bool logits) {
    const std::array<std::int64_t, 4> want{shard.q.shape[0], shard.q.shape[1], shard.q.shape[2], shard.v.shape[3]};
    if (o_shape != want)
        throw InvalidArgument("o", "its shape is " + vkattn::detail::shape_text(o_shape) + " but must be [B, Hq, n_q, Dv] = " +
                                       vkattn::detail::shape_text(want) + " of this rank's shard.");
    // The engine's checks of the first pair's outputs (the paths that write weights and logits).
    std::uint32_t unused = 0;
    float unused_scores = 0.0f;
    const AttentionOutputs part{
        .o = make_view(static_cast<void*>(&unused), o_dtype, Layout::bhnd, {want[0], want[1], r.q_segments[0].length, want[3]}),
        .weights = weights ? &unused_scores : nullptr,
        .logits = logits ? &unused_scores : nullptr};
    vkattn::detail::check_score_rows_path(vkattn::detail::resolve(first, part, block), block.impl);
}

}  // namespace

RingReport ring_attention(MPI_Comm comm, Context& context, const AttentionInputs& shard, const AttentionOutputs& out,
                          const AttentionOptions& options, const RingOptions& ring) {
    const detail::RingSetup setup = detail::prepare(
        comm, shard, options, ring, [&](const detail::RingSetup& r, const AttentionInputs& first, const AttentionOptions& block) {
            if (out.o.data == nullptr) throw InvalidArgument("o", "the tensor has no data pointer.");
            check_outputs(r, first, block, shard, out.o.dtype, out.o.shape, out.weights != nullptr, out.logits != nullptr);
        });
    Merged merged;
    const std::size_t scores = static_cast<std::size_t>(shard.q.shape[0] * shard.q.shape[1] * shard.q.shape[2] * setup.Nkv);
    if (out.weights) merged.weights.assign(scores, 0.0f);
    if (out.logits) merged.logits.assign(scores, 0.0f);
    const RingReport report =
        run_forward(context, setup, shard, DeviceTensor::from_host(context, shard.q), options, ring, merged);
    std::copy(merged.weights.begin(), merged.weights.end(), out.weights);
    std::copy(merged.logits.begin(), merged.logits.end(), out.logits);
    const std::int64_t B = shard.q.shape[0], Hq = shard.q.shape[1], nq = shard.q.shape[2], Dv = shard.v.shape[3];
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t i = 0; i < nq; ++i) {
                const auto row = static_cast<std::size_t>((b * Hq + h) * nq + i);
                for (std::int64_t e = 0; e < Dv; ++e)
                    vkattn::detail::store(out.o, b, h, i, e, merged.o[row * static_cast<std::size_t>(Dv) + static_cast<std::size_t>(e)]);
                if (out.lse) out.lse[row] = static_cast<float>(merged.lse[row]);
            }
    return report;
}

RingReport ring_attention(MPI_Comm comm, Context& context, const DeviceAttentionInputs& shard,
                          const DeviceAttentionOutputs& out, const AttentionOptions& options, const RingOptions& ring) {
    const detail::HostShard host(shard);
    const detail::RingSetup setup = detail::prepare(
        comm, host.inputs, options, ring,
        [&](const detail::RingSetup& r, const AttentionInputs& first, const AttentionOptions& block) {
            if (!out.o.defined()) throw InvalidArgument("o", "the tensor is empty.");
            check_outputs(r, first, block, host.inputs, out.o.dtype(), out.o.shape(), out.weights.defined(),
                          out.logits.defined());
            if (out.o.dtype() != shard.q.dtype())
                throw InvalidArgument("o", "its dtype is " + to_string(out.o.dtype()) + " but q's is " + to_string(shard.q.dtype()) + ".");
            const std::array<std::int64_t, 4> lse_shape{out.o.shape()[0], out.o.shape()[1], out.o.shape()[2], 1};
            if (out.lse.defined() && (out.lse.dtype() != DType::f32 || out.lse.shape() != lse_shape || !out.lse.contiguous()))
                throw InvalidArgument("lse", "must be f32, contiguous, of shape " + vkattn::detail::shape_text(lse_shape) + ".");
            const std::array<std::int64_t, 4> scores_shape{out.o.shape()[0], out.o.shape()[1], out.o.shape()[2], r.Nkv};
            for (const auto& [t, name] : {std::pair{&out.weights, "weights"}, std::pair{&out.logits, "logits"}})
                if (t->defined() && (t->dtype() != DType::f32 || t->shape() != scores_shape || !t->contiguous()))
                    throw InvalidArgument(name, "must be f32, contiguous, of shape [B, Hq, n_q, Nkv] = " +
                                                    vkattn::detail::shape_text(scores_shape) + " (the whole's keys).");
        },
        {}, host.error);
    Merged merged;
    const std::array<std::int64_t, 4> scores_shape{out.o.shape()[0], out.o.shape()[1], out.o.shape()[2], setup.Nkv};
    const auto scores = static_cast<std::size_t>(scores_shape[0] * scores_shape[1] * scores_shape[2] * scores_shape[3]);
    if (out.weights.defined()) merged.weights.assign(scores, 0.0f);
    if (out.logits.defined()) merged.logits.assign(scores, 0.0f);
    const RingReport report = run_forward(context, setup, host.inputs, shard.q, options, ring, merged);
    for (const auto& [tensor, values] : {std::pair{&out.weights, &merged.weights}, std::pair{&out.logits, &merged.logits}})
        if (tensor->defined())
            tensor->upload(make_view(static_cast<const void*>(values->data()), DType::f32, Layout::bhnd, scores_shape));
    // o in q's dtype and the lse, from the host into the caller's tensors.
    std::vector<std::uint8_t> o_bytes;
    const MutableTensorView o = detail::host_buffer(o_bytes, out.o.dtype(), out.o.shape());
    const std::int64_t rows = out.o.shape()[0] * out.o.shape()[1] * out.o.shape()[2], Dv = out.o.shape()[3];
    for (std::int64_t row = 0; row < rows; ++row)
        for (std::int64_t e = 0; e < Dv; ++e)
            vkattn::detail::store(o, 0, 0, row, e, merged.o[static_cast<std::size_t>(row * Dv + e)]);
    out.o.upload(detail::read_only(o));
    if (out.lse.defined()) {
        const std::vector<float> lse(merged.lse.begin(), merged.lse.end());
        out.lse.upload(make_view(static_cast<const void*>(lse.data()), DType::f32, Layout::bhnd, out.lse.shape()));
    }
    return report;
}

double ring_transfer_ms(MPI_Comm comm, std::uint64_t bytes, int repeat, double timeout_s) {
    detail::RingSetup ring;  // its communicator and neighbours only
    ring.comm_owner = detail::duplicate(comm, timeout_s);
    ring.comm = ring.comm_owner->comm;
    detail::check_mpi(MPI_Comm_rank(ring.comm, &ring.me), "MPI_Comm_rank");
    detail::check_mpi(MPI_Comm_size(ring.comm, &ring.P), "MPI_Comm_size");
    // Every rank sends and receives the largest rank's bytes (shards may be uneven).
    const auto most = std::make_shared<std::array<std::uint64_t, 2>>(std::array<std::uint64_t, 2>{bytes, 0});
    detail::bounded_collective(
        [&](MPI_Request* q) { return MPI_Iallreduce(&(*most)[0], &(*most)[1], 1, MPI_UINT64_T, MPI_MAX, ring.comm, q); }, most,
        timeout_s, "agreeing on the size");
    const auto buffers = std::make_shared<std::array<std::vector<std::uint8_t>, 2>>();
    (*buffers)[0].assign(static_cast<std::size_t>((*most)[1]), 1);
    (*buffers)[1].resize(static_cast<std::size_t>((*most)[1]));
    std::vector<double> times;
    for (int r = 0; r < repeat; ++r) {
        detail::bounded_collective([&](MPI_Request* q) { return MPI_Ibarrier(ring.comm, q); }, nullptr, timeout_s,
                                   "the barrier before a transfer");
        const auto start = Clock::now();
        std::vector<MPI_Request> requests;
        std::uint64_t sent = 0;
        detail::post_exchange(ring, r, detail::Carried::k, (*buffers)[0], (*buffers)[1], requests, sent);
        detail::TransferProgress progress(requests, timeout_s, {buffers});
        progress.finish();
        times.push_back(ms_since(start));
    }
    ring.comm_owner->quiet = true;  // every transfer completed
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
}

}  // namespace vkattn::distributed

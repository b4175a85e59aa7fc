// Ring attention (vkattn/distributed.hpp): the K/V shards travel round the ranks while each rank
// attends its queries to the one it holds; partial (o, lse) merged by their log-sum-exp.
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "attention/problem.hpp"
#include "collective.hpp"
#include "ring_setup.hpp"
#include "reference/tensor_access.hpp"
#include "vkattn/distributed.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::distributed {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

RingReport ring_attention(MPI_Comm comm, Context& context, const AttentionInputs& shard, const AttentionOutputs& out,
                          const AttentionOptions& options, const RingOptions& ring) {
    const detail::RingSetup setup = detail::prepare(
        comm, shard, options, ring, [&](const detail::RingSetup& r, const AttentionInputs& first, const AttentionOptions& block) {
            if (out.weights || out.logits)
                throw InvalidArgument(out.weights ? "weights" : "logits", "ring attention returns o and lse only.");
            AttentionOutputs part{.o = out.o};
            part.o.shape[2] = r.q_segments[0].length;
            (void)vkattn::detail::resolve(first, part, block);
            const std::array<std::int64_t, 4> o_shape{shard.q.shape[0], shard.q.shape[1], shard.q.shape[2], shard.v.shape[3]};
            if (out.o.shape != o_shape)
                throw InvalidArgument("o", "its shape must be [B, Hq, n_q, Dv] of this rank's shard.");
        });
    const int P = setup.P;
    const std::int64_t B = shard.q.shape[0], Hq = shard.q.shape[1], Dv = shard.v.shape[3];
    const std::int64_t nq = shard.q.shape[2];

    detail::KvRing kv(setup, shard.k, shard.v);

    // The running merge per query row: o normalised to the running lse m.
    const auto n_rows = static_cast<std::size_t>(B * Hq * nq);
    std::vector<double> acc(n_rows * static_cast<std::size_t>(Dv), 0.0);
    std::vector<double> m(n_rows, -std::numeric_limits<double>::infinity());
    RingReport report;
    report.ranks = P;
    for (int s = 0; s < P; ++s) {
        const auto start = Clock::now();
        std::vector<MPI_Request> requests;
        kv.post(comm, s, requests, report.bytes_sent);
        // The step's compute: every (query segment, key segment) pair with a visible key.
        detail::TransferProgress progress(requests, ring.timeout_s);
        const auto compute_start = Clock::now();
        std::int64_t q_local = 0;
        for (const Segment& qs : setup.q_segments) {
            std::int64_t k_local = 0;
            for (const Segment& ks : setup.key_segments(setup.holder(s))) {
                const detail::PairInputs pair(setup, shard, kv.k(s), kv.v(s), q_local, qs, k_local, ks);
                const AttentionInputs& in = pair.in;
                const AttentionOptions block = setup.block_options(options, qs, ks);
                const std::size_t part_rows = static_cast<std::size_t>(B * Hq * qs.length);
                std::vector<std::uint8_t> o_part(static_cast<std::size_t>(storage_bytes(shard.q.dtype, static_cast<std::int64_t>(part_rows) * Dv)));
                std::vector<float> lse_part(part_rows);
                const AttentionOutputs part{
                    .o = make_view<void*>(o_part.data(), shard.q.dtype, Layout::bhnd, {B, Hq, qs.length, Dv}),
                    .lse = lse_part.data()};
                k_local += ks.length;
                if (qs.length == 0 || ks.length == 0 || vkattn::detail::resolve(in, part, block).visible_pairs() == 0) {
                    ++report.blocks_skipped;
                    continue;
                }
                report.flops += attention(context, in, part, block).flops;
                ++report.blocks_run;
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
                            const double sum = old_scale + new_scale;
                            for (std::int64_t e = 0; e < Dv; ++e) {
                                double& a = acc[row * static_cast<std::size_t>(Dv) + static_cast<std::size_t>(e)];
                                a = (a * old_scale + new_scale * load_element(o_part.data(), shard.q.dtype,
                                                                              static_cast<std::int64_t>(p) * Dv + e)) /
                                    sum;
                            }
                            m[row] = mm + std::log(sum);
                        }
            }
            q_local += qs.length;
        }
        const double compute = ms_since(compute_start);
        report.compute_ms += compute;
        const detail::TransferProgress::Outcome transfer = progress.finish();
        report.wait_ms += transfer.wait_ms;
        report.transfer_ms += transfer.transfer_ms;
        report.hidden_ms += transfer.hidden_ms;
        report.step_ms.push_back(ms_since(start));
    }

    // The sinks join each row's denominator once; then o and lse in the caller's views.
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t i = 0; i < nq; ++i) {
                const auto row = static_cast<std::size_t>((b * Hq + h) * nq + i);
                double scale = 1.0;
                if (!shard.sinks.empty() && shard.sinks[static_cast<std::size_t>(h)] != -INFINITY) {
                    const double sink = shard.sinks[static_cast<std::size_t>(h)];
                    const double mm = std::max(m[row], sink);
                    const double total = mm + std::log(std::exp(m[row] - mm) + std::exp(sink - mm));
                    scale = std::exp(m[row] - total);
                    m[row] = total;
                }
                for (std::int64_t e = 0; e < Dv; ++e)
                    vkattn::detail::store(out.o, b, h, i, e,
                                          acc[row * static_cast<std::size_t>(Dv) + static_cast<std::size_t>(e)] * scale);
                if (out.lse) out.lse[row] = static_cast<float>(m[row]);
            }
    return report;
}

double ring_transfer_ms(MPI_Comm comm, std::uint64_t bytes, int repeat, double timeout_s) {
    // Every rank sends and receives the largest rank's bytes (shards may be uneven).
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_UINT64_T, MPI_MAX, comm), "agreeing on the size");
    int me = 0, P = 1;
    detail::check_mpi(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
    detail::check_mpi(MPI_Comm_size(comm, &P), "MPI_Comm_size");
    std::vector<std::uint8_t> send(static_cast<std::size_t>(bytes), 1), receive(static_cast<std::size_t>(bytes));
    constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
    std::vector<double> times;
    for (int r = 0; r < repeat; ++r) {
        detail::check_mpi(MPI_Barrier(comm), "MPI_Barrier");
        const auto start = Clock::now();
        std::vector<MPI_Request> requests;
        for (std::uint64_t at = 0, piece = 0; at < bytes; at += kPiece, ++piece) {
            const int count = static_cast<int>(std::min(kPiece, bytes - at));
            requests.emplace_back();
            detail::check_mpi(MPI_Isend(send.data() + at, count, MPI_BYTE, (me + 1) % P, static_cast<int>(piece), comm,
                                        &requests.back()), "sending");
            requests.emplace_back();
            detail::check_mpi(MPI_Irecv(receive.data() + at, count, MPI_BYTE, (me + P - 1) % P, static_cast<int>(piece),
                                        comm, &requests.back()), "receiving");
        }
        detail::wait_all(requests, timeout_s, "the ring's transfer");
        times.push_back(ms_since(start));
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
}

}  // namespace vkattn::distributed

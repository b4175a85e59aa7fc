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
#include "reference/tensor_access.hpp"
#include "vkattn/distributed.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::distributed {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// A K or V shard as one contiguous [B, H, n, D] buffer, row after row (any storage type), to send.
std::vector<std::uint8_t> pack(const TensorView& t) {
    const auto [B, H, N, D] = t.shape;
    const std::uint64_t row = storage_bytes(t.dtype, D);
    std::vector<std::uint8_t> out(static_cast<std::size_t>(row * static_cast<std::uint64_t>(B * H * N)));
    std::uint8_t* to = out.data();
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t n = 0; n < N; ++n, to += row)
                std::memcpy(to, static_cast<const std::uint8_t*>(t.data) + storage_bytes(t.dtype, t.offset(b, h, n, 0)), row);
    return out;
}

// Rows [first, first + length) of a view (no copy).
TensorView rows(TensorView t, std::int64_t first, std::int64_t length) {
    t.data = static_cast<const std::uint8_t*>(t.data) + storage_bytes(t.dtype, first * t.strides[2]);
    t.shape[2] = length;
    return t;
}

// FNV-1a over a span's bytes: per-rank constants (lengths, slopes, sinks, scales) must agree.
template <class T>
std::int64_t digest(std::span<const T> values) {
    std::uint64_t h = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i < values.size_bytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return static_cast<std::int64_t>(h ^ values.size());
}

// What every rank must share: shapes other than the sequence, types, options and per-rank constants.
std::vector<std::int64_t> signature(const AttentionInputs& in, const AttentionOptions& o, const RingOptions& ring) {
    auto bits = [](double x) { return std::bit_cast<std::int64_t>(x); };
    return {in.q.shape[0], in.q.shape[1], in.k.shape[1], in.q.shape[3], in.v.shape[3],
            static_cast<std::int64_t>(in.q.dtype), static_cast<std::int64_t>(in.k.dtype),
            static_cast<std::int64_t>(in.v.dtype), static_cast<std::int64_t>(in.kv_lengths.size()),
            static_cast<std::int64_t>(in.alibi_slopes.size()), static_cast<std::int64_t>(in.sinks.size()),
            bits(o.scale.value_or(-1.0)), static_cast<std::int64_t>(o.causal), o.causal_offset.value_or(-(1LL << 40)),
            o.diagonal_offset, o.diagonal_bottom_right, o.window.left, o.window.right, bits(o.softcap.value_or(0.0)),
            bits(o.alibi_max_bias.value_or(0.0)), bits(o.dropout), static_cast<std::int64_t>(o.seed),
            static_cast<std::int64_t>(o.impl), static_cast<std::int64_t>(ring.sharding), digest(in.kv_lengths),
            digest(in.alibi_slopes), digest(in.sinks), digest(in.k_scale), digest(in.v_scale)};
}
constexpr const char* kSignatureNames[] = {
    "the batch size", "the query heads", "the K/V heads", "Dk", "Dv", "q's dtype", "k's dtype", "v's dtype",
    "the key lengths' count", "the ALiBi slopes' count", "the sinks' count", "scale", "causal", "causal_offset",
    "diagonal_offset", "diagonal_bottom_right", "the window's left side", "the window's right side", "softcap",
    "alibi_max_bias", "dropout", "seed", "impl", "the sharding", "kv_lengths", "alibi_slopes", "sinks", "k_scale",
    "v_scale"};

struct Step {
    int holder;  // whose K/V shard this rank holds
};

}  // namespace

RingReport ring_attention(MPI_Comm comm, Context& context, const AttentionInputs& shard, const AttentionOutputs& out,
                          const AttentionOptions& options, const RingOptions& ring) {
    int me = 0, P = 1;
    detail::check_mpi(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
    detail::check_mpi(MPI_Comm_size(comm, &P), "MPI_Comm_size");
    const auto ranks = static_cast<std::size_t>(P);

    // Every rank's shard lengths and signature, gathered before any check can throw.
    const std::array<std::int64_t, 2> mine{shard.q.shape[2], shard.k.shape[2]};
    std::vector<std::int64_t> lengths(2 * ranks);
    detail::check_mpi(MPI_Allgather(mine.data(), 2, MPI_INT64_T, lengths.data(), 2, MPI_INT64_T, comm),
                      "gathering the shard lengths");
    std::vector<std::int64_t> q_rows(ranks), k_rows(ranks);
    for (std::size_t r = 0; r < ranks; ++r) {
        q_rows[r] = lengths[2 * r];
        k_rows[r] = lengths[2 * r + 1];
    }
    const std::vector<std::int64_t> sig = signature(shard, options, ring);
    std::vector<std::int64_t> sigs(sig.size() * ranks);
    detail::check_mpi(MPI_Allgather(sig.data(), static_cast<int>(sig.size()), MPI_INT64_T, sigs.data(),
                                    static_cast<int>(sig.size()), MPI_INT64_T, comm),
                      "gathering the ranks' arguments");
    std::int64_t Nq = 0, Nkv = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
        Nq += q_rows[r];
        Nkv += k_rows[r];
    }
    const std::vector<Segment> q_segments = shard_segments(ring.sharding, Nq, q_rows, me);
    auto key_segments = [&](int rank) { return shard_segments(ring.sharding, Nkv, k_rows, rank); };
    // The block a pair of segments is: this rank's queries of one segment over keys of another.
    auto block_options = [&](const Segment& qs, const Segment& ks) {
        AttentionOptions o = options;
        o.alibi_max_bias.reset();  // given as the whole's slopes (`slopes` below): blocks take no max bias
        o.block = {.query = qs.first, .key = ks.first, .queries = Nq, .keys = Nkv};
        return o;
    };
    const std::vector<float> slopes = options.alibi_max_bias ? alibi_slopes(shard.q.shape[1], *options.alibi_max_bias)
                                                             : std::vector<float>(shard.alibi_slopes.begin(), shard.alibi_slopes.end());
    const std::int64_t B = shard.q.shape[0], Hq = shard.q.shape[1], Dv = shard.v.shape[3];
    const std::int64_t nq = shard.q.shape[2];

    detail::agree(comm, [&] {
        for (std::size_t r = 1; r < ranks; ++r)
            for (std::size_t f = 0; f < sig.size(); ++f)
                if (sigs[r * sig.size() + f] != sigs[f] && static_cast<int>(r) == me)
                    throw InvalidArgument("shard", std::string(kSignatureNames[f]) + " differs from rank 0's; every rank "
                                                   "passes the same shapes (but the sequence), types and options.");
        if (!options.block.whole()) throw InvalidArgument("block", "ring attention makes the blocks itself.");
        if (shard.bool_mask || shard.float_mask)
            throw InvalidArgument(shard.bool_mask ? "bool_mask" : "float_mask",
                                  "ring attention does not take masks yet; use causal, windows or key lengths.");
        if (out.weights || out.logits)
            throw InvalidArgument(out.weights ? "weights" : "logits", "ring attention returns o and lse only.");
        for (const auto& [segments, got, total, name] :
             {std::tuple{q_segments, nq, Nq, "q"}, std::tuple{key_segments(me), shard.k.shape[2], Nkv, "k"}}) {
            std::int64_t want = 0;
            for (const Segment& s : segments) want += s.length;
            if (want != got)
                throw InvalidArgument(name, "this rank's shard has " + std::to_string(got) + " rows but zigzag sharding of " +
                                                std::to_string(total) + " rows over " + std::to_string(P) +
                                                " ranks gives it " + std::to_string(want) + ".");
        }
        if (shard.v.shape[2] != shard.k.shape[2])
            throw InvalidArgument("v", "its shard has " + std::to_string(shard.v.shape[2]) + " rows but k's has " +
                                           std::to_string(shard.k.shape[2]) + ".");
        // The engine's own checks, on this rank's first pair (every pair shares them but the rows).
        AttentionInputs in = shard;  // with the sinks: resolve() checks them (one per query head)
        in.q = rows(shard.q, 0, q_segments[0].length);
        in.alibi_slopes = slopes;
        AttentionOutputs part{.o = out.o};
        part.o.shape[2] = q_segments[0].length;
        (void)vkattn::detail::resolve(in, part, block_options(q_segments[0], key_segments(me)[0]));
        if (out.o.shape != std::array<std::int64_t, 4>{B, Hq, nq, Dv})
            throw InvalidArgument("o", "its shape must be [B, Hq, n_q, Dv] of this rank's shard.");
    });

    // K and V packed for transport: two buffers each, one being sent while the other receives.
    const std::uint64_t k_row = storage_bytes(shard.k.dtype, shard.k.shape[3]);
    const std::uint64_t v_row = storage_bytes(shard.v.dtype, shard.v.shape[3]);
    const std::int64_t Hkv = shard.k.shape[1];
    const std::int64_t most_rows = *std::max_element(k_rows.begin(), k_rows.end());
    std::array<std::vector<std::uint8_t>, 2> k_buf, v_buf;
    k_buf[0] = pack(shard.k);
    v_buf[0] = pack(shard.v);
    for (auto* bufs : {&k_buf, &v_buf})
        for (auto& b : *bufs) b.resize(static_cast<std::size_t>((bufs == &k_buf ? k_row : v_row) * B * Hkv * most_rows));

    // The running merge per query row: o normalised to the running lse m.
    const auto n_rows = static_cast<std::size_t>(B * Hq * nq);
    std::vector<double> acc(n_rows * static_cast<std::size_t>(Dv), 0.0);
    std::vector<double> m(n_rows, -std::numeric_limits<double>::infinity());
    RingReport report;
    report.ranks = P;
    const int next = (me + 1) % P, previous = (me + P - 1) % P;
    constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;  // MPI counts are int: send in pieces
    for (int s = 0; s < P; ++s) {
        const auto start = Clock::now();
        const int holder = (me - s + P) % P, incoming = (me - s - 1 + 2 * P) % P;
        const std::size_t cur = static_cast<std::size_t>(s % 2), spare = 1 - cur;
        std::vector<MPI_Request> requests;
        if (s + 1 < P) {
            for (int which = 0; which < 2; ++which) {
                std::vector<std::uint8_t>* bufs = which == 0 ? k_buf.data() : v_buf.data();
                const std::uint64_t row = which == 0 ? k_row : v_row;
                const std::uint64_t send = row * static_cast<std::uint64_t>(B * Hkv * k_rows[static_cast<std::size_t>(holder)]);
                const std::uint64_t receive = row * static_cast<std::uint64_t>(B * Hkv * k_rows[static_cast<std::size_t>(incoming)]);
                for (std::uint64_t at = 0, piece = 0; at < std::max(send, receive); at += kPiece, ++piece) {
                    const int tag = static_cast<int>(((s % 128) * 2 + which) * 64 + piece);
                    if (at < send) {
                        requests.emplace_back();
                        detail::check_mpi(MPI_Isend(bufs[cur].data() + at, static_cast<int>(std::min(kPiece, send - at)),
                                                    MPI_BYTE, next, tag, comm, &requests.back()),
                                          "sending a K/V shard");
                        report.bytes_sent += std::min(kPiece, send - at);
                    }
                    if (at < receive) {
                        requests.emplace_back();
                        detail::check_mpi(MPI_Irecv(bufs[spare].data() + at, static_cast<int>(std::min(kPiece, receive - at)),
                                                    MPI_BYTE, previous, tag, comm, &requests.back()),
                                          "receiving a K/V shard");
                    }
                }
            }
        }
        // The step's compute: every (query segment, key segment) pair with a visible key.
        const std::int64_t held = k_rows[static_cast<std::size_t>(holder)];
        const TensorView k_held =
            make_view<const void*>(k_buf[cur].data(), shard.k.dtype, Layout::bhnd, {B, Hkv, held, shard.k.shape[3]});
        const TensorView v_held =
            make_view<const void*>(v_buf[cur].data(), shard.v.dtype, Layout::bhnd, {B, Hkv, held, Dv});
        detail::TransferProgress progress(requests, ring.timeout_s);
        const auto compute_start = Clock::now();
        std::int64_t q_local = 0;
        for (const Segment& qs : q_segments) {
            std::int64_t k_local = 0;
            for (const Segment& ks : key_segments(holder)) {
                AttentionInputs in = shard;
                in.q = rows(shard.q, q_local, qs.length);
                in.k = rows(k_held, k_local, ks.length);
                in.v = rows(v_held, k_local, ks.length);
                in.sinks = {};  // joined once, after the merge
                in.alibi_slopes = slopes;
                const AttentionOptions block = block_options(qs, ks);
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

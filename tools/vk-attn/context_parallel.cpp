#include "context_parallel.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>

#include "vkattn/errors.hpp"

#ifdef VKATTN_HAVE_MPI
#include <mpi.h>

#include "vkattn/distributed.hpp"
#include "vkattn/testing/benchmark.hpp"
#endif

namespace vkattn::tool {

#ifdef VKATTN_HAVE_MPI

namespace {
distributed::Sharding sharding_of(bool zigzag) {
    return zigzag ? distributed::Sharding::zigzag : distributed::Sharding::contiguous;
}
std::vector<std::int64_t> even_lengths(std::int64_t total, int P) {
    std::vector<std::int64_t> lengths;
    for (int r = 0; r < P; ++r) lengths.push_back(total * (r + 1) / P - total * r / P);
    return lengths;
}
}  // namespace

ContextParallel::ContextParallel(bool zigzag) : zigzag_(zigzag) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = MPI_THREAD_SINGLE;  // a thread drives each step's transfer (vkattn/distributed.hpp)
    if (!initialized) MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
    rows_ = [this](std::int64_t total) {
        last_total_ = total;
        return rows_of(rank_, total);
    };
}

ContextParallel::~ContextParallel() { MPI_Finalize(); }

void ContextParallel::abort(const std::exception& error) const {
    std::cerr << "vk-attn: " << (dynamic_cast<const Error*>(&error) ? "" : "unexpected error: ") << error.what()
              << " (rank " << rank_ << " of " << ranks_ << ")" << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);  // MPI_Abort does not return; this satisfies [[noreturn]]
}

std::vector<npy::RowRange> ContextParallel::rows_of(int rank, std::int64_t total) const {
    std::vector<npy::RowRange> out;
    for (const distributed::Segment& s :
         distributed::shard_segments(sharding_of(zigzag_), total, even_lengths(total, ranks_), rank))
        out.push_back({s.first, s.length});
    return out;
}

namespace {

RingRun summarize(const distributed::RingReport& r) {
    RingRun run{.compute_ms = r.compute_ms, .wait_ms = r.wait_ms, .bytes_sent = r.bytes_sent, .ranks = r.ranks,
                .blocks_run = r.blocks_run, .blocks_skipped = r.blocks_skipped, .flops = r.flops,
                .transfer_ms = r.transfer_ms, .hidden_ms = r.hidden_ms};
    for (const double ms : r.step_ms) run.total_ms += ms;
    run.step_ms = r.step_ms.empty() ? 0.0 : testing::summarize(r.step_ms).median_ms;
    return run;
}

}  // namespace

RingRun ContextParallel::attention(Context& context, const AttentionInputs& shard, const AttentionOutputs& out,
                                   const AttentionOptions& options) const {
    return summarize(distributed::ring_attention(MPI_COMM_WORLD, context, shard, out, options, {.sharding = sharding_of(zigzag_)}));
}

RingRun ContextParallel::backward(Context& context, const AttentionInputs& shard, const TensorView& o,
                                  std::span<const float> lse, const TensorView& grad_out, const AttentionGradients& grads,
                                  const AttentionOptions& options) const {
    return summarize(distributed::ring_attention_backward(MPI_COMM_WORLD, context, shard, o, lse, grad_out, grads, options,
                                                          {.sharding = sharding_of(zigzag_)}));
}

double ContextParallel::sum(double value) const {
    double total = 0.0;
    MPI_Allreduce(&value, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return total;
}

double ContextParallel::max(double value) const {
    double most = 0.0;
    MPI_Allreduce(&value, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return most;
}

double ContextParallel::transfer_ms(std::uint64_t bytes) const {
    return distributed::ring_transfer_ms(MPI_COMM_WORLD, bytes);
}

std::vector<float> ContextParallel::gather(const std::vector<float>& shard, std::int64_t B, std::int64_t H,
                                           std::int64_t total, std::int64_t X) const {
    // Counted in rows of X floats (one MPI datatype), so that the counts fit MPI's int far longer.
    if (B * H * total > std::numeric_limits<int>::max())
        throw InvalidArgument("--out", "B·H·N = " + std::to_string(B * H * total) + " rows are more than one gather "
                                       "takes (2^31 - 1).");
    std::vector<int> counts(static_cast<std::size_t>(ranks_)), displacements(static_cast<std::size_t>(ranks_));
    int at = 0;
    for (int r = 0; r < ranks_; ++r) {
        std::int64_t n = 0;
        for (const npy::RowRange& s : rows_of(r, total)) n += s.length;
        counts[static_cast<std::size_t>(r)] = static_cast<int>(B * H * n);
        displacements[static_cast<std::size_t>(r)] = at;
        at += counts[static_cast<std::size_t>(r)];
    }
    MPI_Datatype row_type;
    MPI_Type_contiguous(static_cast<int>(X), MPI_FLOAT, &row_type);
    MPI_Type_commit(&row_type);
    std::vector<float> all(rank_ == 0 ? static_cast<std::size_t>(at) * static_cast<std::size_t>(X) : 0);
    MPI_Gatherv(shard.data(), counts[static_cast<std::size_t>(rank_)], row_type, all.data(), counts.data(),
                displacements.data(), row_type, 0, MPI_COMM_WORLD);
    MPI_Type_free(&row_type);
    if (rank_ != 0) return {};
    std::vector<float> whole(static_cast<std::size_t>(B * H * total * X));
    for (int r = 0; r < ranks_; ++r) {
        const std::vector<npy::RowRange> segments = rows_of(r, total);
        std::int64_t n = 0;
        for (const npy::RowRange& s : segments) n += s.length;
        const float* from = all.data() + static_cast<std::ptrdiff_t>(displacements[static_cast<std::size_t>(r)]) * X;
        for (std::int64_t bh = 0; bh < B * H; ++bh) {
            std::int64_t row = 0;
            for (const npy::RowRange& s : segments)
                for (std::int64_t i = 0; i < s.length; ++i, ++row)
                    std::copy_n(from + (bh * n + row) * X, X, whole.data() + (bh * total + s.first + i) * X);
        }
    }
    return whole;
}

#else

ContextParallel::ContextParallel(bool) {
    throw InvalidArgument("--context-parallel", "this vk-attn was built without MPI (apt-get install libopenmpi-dev "
                                                "openmpi-bin, then rebuild).");
}
ContextParallel::~ContextParallel() = default;
void ContextParallel::abort(const std::exception&) const { std::exit(1); }
std::vector<npy::RowRange> ContextParallel::rows_of(int, std::int64_t) const { return {}; }
RingRun ContextParallel::attention(Context&, const AttentionInputs&, const AttentionOutputs&, const AttentionOptions&) const {
    return {};
}
RingRun ContextParallel::backward(Context&, const AttentionInputs&, const TensorView&, std::span<const float>, const TensorView&,
                                  const AttentionGradients&, const AttentionOptions&) const {
    return {};
}
double ContextParallel::sum(double value) const { return value; }
double ContextParallel::max(double value) const { return value; }
double ContextParallel::transfer_ms(std::uint64_t) const { return 0.0; }
std::vector<float> ContextParallel::gather(const std::vector<float>&, std::int64_t, std::int64_t, std::int64_t,
                                           std::int64_t) const {
    return {};
}

#endif

}  // namespace vkattn::tool

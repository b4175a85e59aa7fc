// --context-parallel on run and bench: this process is one rank of an MPI job (mpirun -np P
// vk-attn ...), attending its shard of the sequence with vkattn::distributed::ring_attention.
// Built only where CMake found MPI (VKATTN_HAVE_MPI); elsewhere the flag is refused by name.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "npy.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"

namespace vkattn::tool {

struct RingRun {
    double step_ms = 0.0;      // median over the steps
    double compute_ms = 0.0, wait_ms = 0.0;
    std::uint64_t bytes_sent = 0;
    int ranks = 0, blocks_run = 0, blocks_skipped = 0;
    double flops = 0.0;     // this rank's blocks'
    double total_ms = 0.0;  // every step
    double transfer_ms = 0.0, hidden_ms = 0.0;  // the transfers, and their part during the compute
};

class ContextParallel {
public:
    // Initializes MPI (once per process); `zigzag` picks the sharding.
    explicit ContextParallel(bool zigzag);
    ~ContextParallel();  // MPI_Finalize
    // An error on this rank: says it (one line, as vk-attn does) and takes the whole job down
    // (MPI_Abort), since the other ranks may be waiting on this one.
    [[noreturn]] void abort(const std::exception& error) const;
    ContextParallel(const ContextParallel&) = delete;
    ContextParallel& operator=(const ContextParallel&) = delete;

    int rank() const { return rank_; }
    int ranks() const { return ranks_; }
    // This rank's rows of a sequence of any length: an even split, or zigzag's two chunks.
    const npy::RowSelector& rows() const { return rows_; }
    std::int64_t last_total() const { return last_total_; }  // the sequence length rows() last saw
    std::vector<npy::RowRange> rows_of(int rank, std::int64_t total) const;

    RingRun attention(Context& context, const AttentionInputs& shard, const AttentionOutputs& out,
                      const AttentionOptions& options) const;
    // ring_attention_backward given this rank's o and lse of the forward.
    RingRun backward(Context& context, const AttentionInputs& shard, const TensorView& o, std::span<const float> lse,
                     const TensorView& grad_out, const AttentionGradients& grads, const AttentionOptions& options) const;
    double sum(double value) const;  // over the ranks
    double max(double value) const;  // over the ranks
    // One ring step's transfer alone (every rank sending `bytes` on): ms, median of a few.
    double transfer_ms(std::uint64_t bytes) const;
    // Every rank's [B, H, n_r, X] float rows, placed at their sequence positions in the whole
    // [B, H, N, X] on rank 0 (other ranks get nothing back).
    std::vector<float> gather(const std::vector<float>& shard, std::int64_t B, std::int64_t H, std::int64_t total,
                              std::int64_t X) const;

private:
    [[maybe_unused]] bool zigzag_ = false;  // read only where vk-attn is built with MPI
    int rank_ = 0, ranks_ = 1;
    npy::RowSelector rows_;
    mutable std::int64_t last_total_ = 0;
};

}  // namespace vkattn::tool

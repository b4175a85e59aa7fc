// Context parallelism over MPI: ring attention (Liu et al. 2023, as ring-flash-attention and
// PyTorch's context_parallel run it over NCCL), for sequences too long for one device. The library
// target vkattn::distributed, built when CMake finds MPI; the core library stays MPI-free.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <vector>

#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::distributed {

// How the whole sequence is cut into the ranks' shards (queries and keys alike, each over its own
// length). contiguous: rank r holds rows [offset_r, offset_r + n_r) in rank order, any n_r (uneven
// shards welcome). zigzag: the sequence is cut into 2P chunks (chunk c holds rows
// [floor(N·c / 2P), floor(N·(c+1) / 2P))), rank r holding chunks r and 2P − 1 − r one after the
// other, which balances causal work across the ranks.
enum class Sharding { contiguous, zigzag };

// The rows of the whole sequence of length `total` that `rank` of `ranks` holds, as (first row,
// length) segments in the order the shard stores them.
struct Segment {
    std::int64_t first = 0, length = 0;
};
std::vector<Segment> shard_segments(Sharding sharding, std::int64_t total, const std::vector<std::int64_t>& lengths,
                                    int rank);

struct RingOptions {
    Sharding sharding = Sharding::contiguous;
    double timeout_s = 120.0;  // the longest any wait on another rank may take (after this rank's compute)
};

// What this rank did: P steps, each attending its queries to the K/V shard it holds while that
// shard travels on. Times are this rank's wall clock.
struct RingReport {
    int ranks = 0;
    std::vector<double> step_ms;    // each step: compute, then whatever wait the transfer still needed
    double compute_ms = 0.0;        // the steps' device work and the host's merging of its results
    double wait_ms = 0.0;           // blocked on the transfer after the step's compute
    double transfer_ms = 0.0;       // the transfers, posting to completion (a thread drives them
    double hidden_ms = 0.0;         // during the compute where MPI allows: MPI_THREAD_SERIALIZED);
                                    // hidden: the part during the compute
    std::uint64_t bytes_sent = 0;   // K and V shards sent to the next rank (the backward: dK/dV too)
    int blocks_run = 0, blocks_skipped = 0;  // (query segment, key segment) pairs; skipped: no visible key
    double flops = 0.0;             // the blocks' useful flops (AttentionReport::flops), this rank's
};

// The ring's transfer alone: every rank sends the largest rank's `bytes` to the next and receives as
// much from the previous, as one step of ring_attention does, without compute. Milliseconds, the median of
// `repeat` exchanges (bench: how much of the transfer the compute hides).
double ring_transfer_ms(MPI_Comm comm, std::uint64_t bytes, int repeat = 5, double timeout_s = 120.0);

// Initialize MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) or better, so that a thread
// can drive each step's transfer while the step computes; with MPI_Init the transfer waits for the
// step's end.
//
// Attention of this rank's query shard over the whole sequence's keys, the K/V shards passed round
// the ring of `comm`'s ranks: in step s rank r holds rank (r − s) mod P's K/V shard and sends it to
// rank r + 1 (MPI_Isend/MPI_Irecv, overlapped with the step's compute). Each (query segment, key
// segment) pair is one attention call with AttentionOptions::block at the segments' positions, so the
// mask model, key lengths (the whole's, [B] on every rank), ALiBi and dropout's Philox numbers are
// the whole's; pairs with no visible key are skipped; the partial (o, lse) merge by their log-sum-exp
// (in double on the host; each pair's o arrives in q's dtype, so f16/bf16 outputs carry one rounding
// per pair more than one device's) and the sinks join each row's denominator once, at the end. `shard`: q [B, Hq, n_q, Dk], k and v
// [B, Hkv, n_k, D] (any types attention takes), this rank's rows by `ring.sharding`; masks this
// rank's rows over the whole's keys, broadcastable to [B, Hq, n_q, Nkv] (each pair takes its part);
// `out`: o [B, Hq, n_q, Dv] and optionally lse [B, Hq, n_q], weights and logits (f32, dense
// [B, Hq, n_q, Nkv]: this rank's rows over the whole's keys; each pair's weights, normalised by
// its own log-sum-exp, are rescaled by e^(lse_pair − lse) once the row's is known; logits are
// placed as computed, every pair run for them, hidden keys included, as scaled and softcapped logits
// are defined there; both need the three-stage path, as attention's do).
// Every rank must call it with the same options and B, heads and dims: the ranks check their shards
// together first, and every rank throws the first failing rank's InvalidArgument (naming that rank)
// before any work (shapes but the sequence, types, options and the values of kv_lengths, slopes,
// sinks and fp8 scales must agree). Every wait on another rank, collectives included, gives up after
// ring.timeout_s (counted after this rank's own compute) and throws vkattn::Error on the waiting
// rank. The call talks over its own duplicate of `comm` (MPI_Comm_idup), so its messages never meet
// the caller's; after an error past the agreement, what it left pending stays there (its buffers
// kept alive) and `comm` stays usable, but the other ranks may be in any state: ending the job
// (MPI_Abort, as vk-attn does) is the safe answer.
RingReport ring_attention(MPI_Comm comm, Context& context, const AttentionInputs& shard, const AttentionOutputs& out,
                          const AttentionOptions& options = {}, const RingOptions& ring = {});

// The same on device tensors (vkattn/plan.hpp): q, k, v dense (any strides; not paged, not packed),
// key lengths (i32 [B]) and masks (u8 / f32, contiguous) as attention takes them; out.o of q's shape
// but Dv and q's dtype, out.lse optional (f32, contiguous [B, Hq, n_q, 1]), out.weights and
// out.logits optional (f32, contiguous [B, Hq, n_q, Nkv]).
// q stays on the device; k, v, the key lengths and the masks are read back once (MPI carries the K/V
// shards from host memory: Vulkan has no GPU-direct transport, and the masks' parts are cut there),
// and each block's partial (o, lse) is merged on the host. Blocking: returns once o and lse are in
// the caller's tensors.
RingReport ring_attention(MPI_Comm comm, Context& context, const DeviceAttentionInputs& shard,
                          const DeviceAttentionOutputs& out, const AttentionOptions& options = {},
                          const RingOptions& ring = {});

// The backward of ring_attention, on ring-flash-attention's schedule: the gradients of a loss with
// respect to this rank's shards, given its shards of the forward's o and lse (ring_attention's
// outputs for the same inputs and options: o [B, Hq, n_q, Dv] of q's dtype, lse B·Hq·n_q values) and
// grad_out = ∂loss/∂o (o's shape and dtype). The K/V shards travel the ring as in the forward; in
// each step this rank runs, in one submission, the device backward (attention_backward on device
// tensors) of every visible pair of its query segments and the held key segments, as blocks of the
// whole given the whole's o and lse rows; dQ stays here, and the held shard's dK and dV join an
// fp32 accumulator that follows that shard round the ring one step behind it and arrives home
// after the last step (one transfer more than the forward's, not hidden). The sinks' gradient
// (−Σ e^(sink − lse)·(dO·O) over every row) is summed over the ranks. `grads`: dq like q, dk and dv
// like this rank's k and v (together, or neither), d_sinks [Hq] with sinks, d_float_mask the
// gradient of this rank's float mask (its own shape, C-contiguous; a mask broadcast over the rows
// that stands for one tensor shared by every rank gets each rank's share: sum them over the ranks
// for the shared tensor's). Float types only (f32, f16, bf16); a pair's gradients are rounded to the storage type
// once before the sum (as a device backward's own key slices are not), so f16/bf16 gradients
// carry up to a few roundings more than one device's. Arguments agreed across the ranks first,
// every wait bounded, as ring_attention; report: bytes_sent counts the dK/dV transfers too, flops
// the backward's (2·(3·Dk + 2·Dv) per visible pair).
RingReport ring_attention_backward(MPI_Comm comm, Context& context, const AttentionInputs& shard, const TensorView& o,
                                   std::span<const float> lse, const TensorView& grad_out, const AttentionGradients& grads,
                                   const AttentionOptions& options = {}, const RingOptions& ring = {});

// The same on device tensors: the forward's o and lse (f32, contiguous [B, Hq, n_q, 1]) and grad_out
// of this rank, the gradients as DeviceAttentionGradients (dq, dk, dv of their inputs' shapes and
// dtypes; d_sinks f32 [Hq]; d_float_mask f32 of the float mask's shape). q, o and grad_out stay on
// the device; k, v, the masks and lse are read back once (as the forward), o and grad_out too for
// the sinks' gradient and the checks. Blocking: returns once the gradients are in the caller's tensors.
RingReport ring_attention_backward(MPI_Comm comm, Context& context, const DeviceAttentionInputs& shard, const DeviceTensor& o,
                                   const DeviceTensor& lse, const DeviceTensor& grad_out, const DeviceAttentionGradients& grads,
                                   const AttentionOptions& options = {}, const RingOptions& ring = {});

}  // namespace vkattn::distributed

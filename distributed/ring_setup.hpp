// What the ring's forward and backward share: the ranks' shard lengths gathered and their arguments
// agreed before any work, the segment pairs each step attends as blocks of the whole, and the
// exchange of a buffer with the ring's neighbours.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "collective.hpp"
#include "shard/block_inputs.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/plan.hpp"
#include "vkattn/distributed.hpp"

namespace vkattn::distributed::detail {

struct RingSetup {
    MPI_Comm comm = MPI_COMM_NULL;         // the call's own duplicate of the caller's communicator
    std::shared_ptr<OwnedComm> comm_owner;  // frees it with the setup, if quiet
    int me = 0, P = 1;
    Sharding sharding = Sharding::contiguous;
    std::vector<std::int64_t> q_rows, k_rows;  // every rank's shard lengths
    std::int64_t Nq = 0, Nkv = 0;              // the whole's
    std::vector<Segment> q_segments;           // this rank's query rows in the whole
    std::vector<float> slopes;  // the whole's ALiBi slopes (given, or alibi_max_bias's standard ones)

    int next() const { return (me + 1) % P; }
    int previous() const { return (me + P - 1) % P; }
    // Whose K/V shard this rank holds in step s (its own in step 0).
    int holder(int step) const { return (me - step % P + P) % P; }
    std::vector<Segment> key_segments(int rank) const;
    // `options` for the block of this rank's query segment `qs` over the key segment `ks`.
    AttentionOptions block_options(const AttentionOptions& options, const Segment& qs, const Segment& ks) const;
};

// The inputs of one block: this rank's query segment `qs` (its rows from `q_local`) over the key
// segment `ks` of the held shard `k`, `v` (its rows from `k_local`): views of q, k and v, the masks'
// parts (this rank's rows, the segment's columns of the whole's keys) copied, the whole's slopes,
// no sinks (joined once, after the merge).
struct PairInputs {
    PairInputs(const RingSetup& setup, const AttentionInputs& shard, const TensorView& k, const TensorView& v,
               std::int64_t q_local, const Segment& qs, std::int64_t k_local, const Segment& ks);
    PairInputs(const PairInputs&) = delete;  // `in` points into the members
    PairInputs& operator=(const PairInputs&) = delete;

    AttentionInputs in;
    std::array<vkattn::detail::Extent, 4> mask_box;  // the masks' part: extents over [B, Hq, n_q, Nkv]
    std::vector<std::uint8_t> bool_mask;
    std::vector<float> float_mask;
    std::vector<std::int64_t> bool_shape, float_shape;
};

// A pair's inputs on the device: `q` (this rank's query rows of the pair), `k` and `v` (the held
// shard's rows of the pair), the key lengths, the masks' parts uploaded, the whole's slopes, the fp8
// scales; no sinks (joined once, after the merge).
DeviceAttentionInputs device_inputs(Context& context, const PairInputs& pair, const DeviceTensor& q, const DeviceTensor& k,
                                    const DeviceTensor& v, const DeviceTensor& lengths);

// The end of a step's compute (from `compute_start`) and of its transfer, waited for here, in the report.
inline void finish_compute(RingReport& report, TransferProgress& progress, Clock::time_point compute_start) {
    report.compute_ms += ms_since(compute_start);
    const TransferProgress::Outcome transfer = progress.finish();
    report.wait_ms += transfer.wait_ms;
    report.transfer_ms += transfer.transfer_ms;
    report.hidden_ms += transfer.hidden_ms;
}

// Rows [first, first + length) of a view, every batch and head (no copy).
template <class View>
View rows(const View& t, std::int64_t first, std::int64_t length) {
    return vkattn::detail::narrowed(t, {0, t.shape[0]}, {0, t.shape[1]}, {first, length});
}

// The checks of one ring call beyond the shared ones: given the setup and the first pair's block
// (inputs and options), throws InvalidArgument for this call's own arguments (outputs, gradients).
using CallCheck = std::function<void(const RingSetup&, const AttentionInputs& first, const AttentionOptions& first_options)>;

// Gathers every rank's shard lengths and arguments and agrees on them (agree()): the same shapes
// but the sequence, types, options and per-rank constants everywhere, shards of the sharding's
// lengths, masks broadcastable to [B, Hq, n_q, Nkv] (this rank's rows, the whole's keys), no block,
// the engine's own checks on this rank's first pair, then `check`.
// What a call asks for that decides who talks to whom (the backward's dK/dV and sinks' gradient),
// each with its name: every rank must ask alike.
using CallFlags = std::vector<std::pair<std::int64_t, std::string>>;

// All later communication goes over `RingSetup::comm`, the call's own duplicate of `comm`.
// `early`: an error this rank met before (reading its device shard), thrown first in the agreement.
RingSetup prepare(MPI_Comm comm, const AttentionInputs& shard, const AttentionOptions& options, const RingOptions& ring,
                  const CallCheck& check, const CallFlags& call = {}, std::exception_ptr early = nullptr);

// What a step's messages carry; part of their tags.
enum class Carried { k, v, dk, dv };

// Posts one buffer's exchange round the ring: `send` to the next rank, `receive` from the previous,
// in pieces an int count can carry, tagged by step and what they carry. Adds the bytes sent to
// `bytes_sent`.
void post_exchange(const RingSetup& setup, int step, Carried what, std::span<const std::uint8_t> send,
                   std::span<std::uint8_t> receive, std::vector<MPI_Request>& requests, std::uint64_t& bytes_sent);

// This rank's K/V shard packed for transport ([B, Hkv, n, D] rows, any storage type) and the shard
// arriving: two buffers each, the step's held shard in one while the next arrives in the other.
class KvRing {
public:
    KvRing(const RingSetup& setup, const TensorView& k, const TensorView& v);
    // Posts step s's exchange: the held shard on to the next rank, the previous rank's into the
    // spare buffers; nothing in the last step.
    void post(int step, std::vector<MPI_Request>& requests, std::uint64_t& bytes_sent);
    // The shard held in step s, [B, Hkv, its holder's rows, D].
    TensorView k(int step) const { return held(step, 0); }
    TensorView v(int step) const { return held(step, 1); }
    // What the step's transfers read and write, for TransferProgress to keep.
    std::shared_ptr<void> buffers() const { return buffers_; }

private:
    using Buffers = std::array<std::array<std::vector<std::uint8_t>, 2>, 2>;  // [k or v][step parity]
    TensorView held(int step, int which) const;
    const RingSetup& setup_;
    std::array<TensorView, 2> shape_;  // k's and v's: dtype, B, Hkv, D
    std::shared_ptr<Buffers> buffers_;
};

}  // namespace vkattn::distributed::detail

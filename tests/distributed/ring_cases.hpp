// Ring attention's test cases (tests/distributed/test_ring*.cpp), run by ctest under mpirun with 2
// and 3 ranks, each with its own lavapipe instance: every rank builds the same whole inputs (the same
// seed), passes its shard, and checks its shard of the outputs (or of the gradients) against the CPU
// reference of the whole call.
#pragma once

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

namespace vkattn::ring_test {

using namespace vkattn::testing;
using distributed::Segment;
using distributed::Sharding;

// This process's rank, and the ranks in MPI_COMM_WORLD.
int rank_of();
int ranks_of();

// The rank's context: the validation layer on, outputs poisoned.
Context& context();

// The rows of `segments` of a [B, H, N, D] tensor, one after the other, as a new bhnd tensor (any
// storage type: rows are copied as bytes).
HostTensor gather_rows(const HostTensor& t, const std::vector<Segment>& segments);

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

// What a named case changes of the default RingCase.
using Setup = std::function<void(RingCase&)>;

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

    RingData(const RingCase& c, std::mt19937& rng);
    RingData(const RingData&) = delete;  // the inputs point into the members

    // This rank's rows of a whole [B, H, N, D] tensor, as doubles in shard order.
    std::vector<double> rows_of(const HostTensor& t) const { return gather_rows(t, mine).doubles(); }
};

// The ring's forward against the CPU reference of the whole call: this rank's rows of o and lse,
// and of the weights and logits where the case asks for them.
void expect_ring_equals_whole(const RingCase& c);

// The ring's forward then its backward, against the whole's reference gradients: this rank's rows
// of dq, dk and dv, and the sinks' gradient on every rank.
void expect_ring_gradients_equal_whole(const RingCase& c);

// Every case of ring_cases() in both shardings.
void for_each_ring_case(const std::function<void(const RingCase&)>& expect);

// The small calls' tensors, [1, 2, 5, 16] f32: random inputs, and an output poisoned with NaN.
inline HostTensor good_of(std::mt19937& rng) { return random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 5, 16}); }
inline HostTensor o16_of() { return nan_tensor(DType::f32, Layout::bhnd, {1, 2, 5, 16}); }

}  // namespace vkattn::ring_test

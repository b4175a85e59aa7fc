#include "ring_setup.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include "attention/problem.hpp"
#include "collective.hpp"
#include "device_shard.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::distributed::detail {
namespace {

// FNV-1a over a span's bytes: per-rank constants (lengths, slopes, sinks, scales) must agree.
template <class T>
std::int64_t digest(std::span<const T> values) {
    std::uint64_t h = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i < values.size_bytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return static_cast<std::int64_t>(h ^ values.size());
}

// What every rank must share, each value with its name: shapes other than the sequence, types,
// options, per-rank constants and what the call asks for (`call`: what decides who talks to whom).
std::vector<std::pair<std::int64_t, std::string>> signature(const AttentionInputs& in, const AttentionOptions& o,
                                                            const RingOptions& ring, const CallFlags& call) {
    auto bits = [](double x) { return std::bit_cast<std::int64_t>(x); };
    auto tri = [](const std::optional<bool>& x) { return x ? std::int64_t{*x} : std::int64_t{-1}; };
    std::vector<std::pair<std::int64_t, std::string>> sig{
        {in.q.shape[0], "the batch size"}, {in.q.shape[1], "the query heads"}, {in.k.shape[1], "the K/V heads"},
        {in.q.shape[3], "Dk"}, {in.v.shape[3], "Dv"}, {static_cast<std::int64_t>(in.q.dtype), "q's dtype"},
        {static_cast<std::int64_t>(in.k.dtype), "k's dtype"}, {static_cast<std::int64_t>(in.v.dtype), "v's dtype"},
        {static_cast<std::int64_t>(in.kv_lengths.size()), "the key lengths' count"},
        {static_cast<std::int64_t>(in.alibi_slopes.size()), "the ALiBi slopes' count"},
        {static_cast<std::int64_t>(in.sinks.size()), "the sinks' count"}, {bits(o.scale.value_or(-1.0)), "scale"},
        {static_cast<std::int64_t>(o.causal), "causal"}, {o.causal_offset.value_or(-(1LL << 40)), "causal_offset"},
        {o.diagonal_offset, "diagonal_offset"}, {o.diagonal_bottom_right, "diagonal_bottom_right"},
        {o.window.left, "the window's left side"}, {o.window.right, "the window's right side"},
        {bits(o.softcap.value_or(0.0)), "softcap"}, {bits(o.alibi_max_bias.value_or(0.0)), "alibi_max_bias"},
        {bits(o.dropout), "dropout"}, {static_cast<std::int64_t>(o.seed), "seed"},
        {static_cast<std::int64_t>(o.impl), "impl"}, {o.splits, "splits"},
        {static_cast<std::int64_t>(o.logits_stage), "logits_stage"}, {tri(o.variant.texel_loads), "variant.texel_loads"},
        {tri(o.variant.shared_tiles), "variant.shared_tiles"}, {tri(o.variant.subgroup_ops), "variant.subgroup_ops"},
        {static_cast<std::int64_t>(ring.sharding), "the sharding"}, {bits(ring.timeout_s), "the timeout"},
        {in.bool_mask.has_value(), "whether a bool mask is given"}, {in.float_mask.has_value(), "whether a float mask is given"},
        {digest(in.kv_lengths), "kv_lengths"}, {digest(in.alibi_slopes), "alibi_slopes"}, {digest(in.sinks), "sinks"},
        {digest(in.k_scale), "k_scale"}, {digest(in.v_scale), "v_scale"}};
    for (const auto& [value, name] : call) sig.emplace_back(value, name);
    return sig;
}

// MPI counts are int: a message goes in pieces of 1 GiB, at most kPieces of them (the tag's room).
constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
constexpr std::uint64_t kPieces = 64;

}  // namespace

std::vector<Segment> RingSetup::key_segments(int rank) const { return shard_segments(sharding, Nkv, k_rows, rank); }

AttentionOptions RingSetup::block_options(const AttentionOptions& options, const Segment& qs, const Segment& ks) const {
    AttentionOptions o = options;
    o.alibi_max_bias.reset();  // given as the whole's slopes (`slopes`): blocks take no max bias
    o.block = {.query = qs.first, .key = ks.first, .queries = Nq, .keys = Nkv};
    return o;
}

PairInputs::PairInputs(const RingSetup& setup, const AttentionInputs& shard, const TensorView& k, const TensorView& v,
                       std::int64_t q_local, const Segment& qs, std::int64_t k_local, const Segment& ks)
    : in(shard) {
    in.q = rows(shard.q, q_local, qs.length);
    in.k = rows(k, k_local, ks.length);
    in.v = rows(v, k_local, ks.length);
    in.sinks = {};
    in.alibi_slopes = setup.slopes;
    mask_box = {{{0, shard.q.shape[0]}, {0, shard.q.shape[1]}, {q_local, qs.length}, {ks.first, ks.length}}};
    const auto& box = mask_box;
    if (shard.bool_mask) {
        const auto* data = static_cast<const std::uint8_t*>(shard.bool_mask->data);
        bool_shape = vkattn::detail::for_each_part_row(shard.bool_mask->shape, box, [&](std::int64_t first, std::int64_t count) {
            bool_mask.insert(bool_mask.end(), data + first, data + first + count);
        });
        in.bool_mask = MaskView{bool_mask.data(), bool_shape};
    }
    if (shard.float_mask) {
        const auto* data = static_cast<const float*>(shard.float_mask->data);
        float_shape = vkattn::detail::for_each_part_row(shard.float_mask->shape, box, [&](std::int64_t first, std::int64_t count) {
            float_mask.insert(float_mask.end(), data + first, data + first + count);
        });
        in.float_mask = MaskView{float_mask.data(), float_shape};
    }
}

DeviceAttentionInputs device_inputs(Context& context, const PairInputs& pair, const DeviceTensor& q, const DeviceTensor& k,
                                    const DeviceTensor& v, const DeviceTensor& lengths) {
    DeviceAttentionInputs in{.q = q, .k = k, .v = v, .kv_lengths = lengths, .alibi_slopes = pair.in.alibi_slopes,
                             .k_scale = pair.in.k_scale, .v_scale = pair.in.v_scale};
    if (pair.in.bool_mask) in.bool_mask = device_array(context, pair.bool_mask.data(), DType::u8, pair.bool_shape);
    if (pair.in.float_mask) in.float_mask = device_array(context, pair.float_mask.data(), DType::f32, pair.float_shape);
    return in;
}

RingSetup prepare(MPI_Comm user_comm, const AttentionInputs& shard, const AttentionOptions& options, const RingOptions& ring,
                  const CallCheck& check, const CallFlags& call, std::exception_ptr early) {
    RingSetup r;
    check_mpi(MPI_Comm_rank(user_comm, &r.me), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(user_comm, &r.P), "MPI_Comm_size");
    // A communicator of the call's own: its messages never meet the caller's, and what a failed
    // call leaves behind stays on it.
    r.comm_owner = duplicate(user_comm, ring.timeout_s);
    r.comm = r.comm_owner->comm;
    const MPI_Comm comm = r.comm;
    r.sharding = ring.sharding;
    const auto ranks = static_cast<std::size_t>(r.P);

    // Every rank's shard lengths and signature, gathered before any check can throw (each wait
    // bounded: a rank that never calls the ring).
    struct Gathered {
        std::array<std::int64_t, 2> mine{};
        std::vector<std::int64_t> lengths, sig, sigs;
    };
    const auto gathered = std::make_shared<Gathered>();
    Gathered& g = *gathered;
    g.mine = {shard.q.shape[2], shard.k.shape[2]};
    g.lengths.resize(2 * ranks);
    bounded_collective(
        [&](MPI_Request* q) { return MPI_Iallgather(g.mine.data(), 2, MPI_INT64_T, g.lengths.data(), 2, MPI_INT64_T, comm, q); },
        gathered, ring.timeout_s, "gathering the shard lengths");
    const std::vector<std::int64_t>& lengths = g.lengths;
    for (std::size_t i = 0; i < ranks; ++i) {
        r.q_rows.push_back(lengths[2 * i]);
        r.k_rows.push_back(lengths[2 * i + 1]);
        r.Nq += lengths[2 * i];
        r.Nkv += lengths[2 * i + 1];
    }
    const std::vector<std::pair<std::int64_t, std::string>> named = signature(shard, options, ring, call);
    for (const auto& [value, name] : named) g.sig.push_back(value);
    g.sigs.resize(g.sig.size() * ranks);
    bounded_collective(
        [&](MPI_Request* q) {
            return MPI_Iallgather(g.sig.data(), static_cast<int>(g.sig.size()), MPI_INT64_T, g.sigs.data(),
                                  static_cast<int>(g.sig.size()), MPI_INT64_T, comm, q);
        },
        gathered, ring.timeout_s, "gathering the ranks' arguments");
    const std::vector<std::int64_t>&sig = g.sig, &sigs = g.sigs;
    r.q_segments = shard_segments(r.sharding, r.Nq, r.q_rows, r.me);

    // A rank that could not read its shard first: the others' checks would only see its empty one.
    if (std::exception_ptr error = agreement(
            comm, [&] { if (early) std::rethrow_exception(early); }, ring.timeout_s)) {
        r.comm_owner->quiet = true;  // every collective completed
        std::rethrow_exception(error);
    }
    const std::exception_ptr error = agreement(comm, [&] {
        for (std::size_t i = 1; i < ranks; ++i)
            for (std::size_t f = 0; f < sig.size(); ++f)
                if (sigs[i * sig.size() + f] != sigs[f] && static_cast<int>(i) == r.me)
                    throw InvalidArgument("shard", named[f].second + " differs from rank 0's; every rank passes the same "
                                                   "shapes (but the sequence), types and options, and asks for the same "
                                                   "outputs.");
        // Inside the agreement: it throws for a shard without heads.
        r.slopes = options.alibi_max_bias ? alibi_slopes(shard.q.shape[1], *options.alibi_max_bias)
                                          : std::vector<float>(shard.alibi_slopes.begin(), shard.alibi_slopes.end());
        if (!options.block.whole()) throw InvalidArgument("block", "ring attention makes the blocks itself.");
        // Masks: this rank's rows over the whole's keys.
        for (const auto& [mask, name] : {std::pair{&shard.bool_mask, "bool_mask"}, std::pair{&shard.float_mask, "float_mask"}})
            if (*mask) {
                if ((*mask)->data == nullptr) throw InvalidArgument(name, "the mask has no data pointer.");
                (void)vkattn::detail::broadcast_mask((*mask)->shape, name,
                                                     {shard.q.shape[0], shard.q.shape[1], shard.q.shape[2], r.Nkv});
            }
        for (const auto& [segments, got, total, name] :
             {std::tuple{r.q_segments, shard.q.shape[2], r.Nq, "q"}, std::tuple{r.key_segments(r.me), shard.k.shape[2], r.Nkv, "k"}}) {
            std::int64_t want = 0;
            for (const Segment& s : segments) want += s.length;
            if (want != got)
                throw InvalidArgument(name, "this rank's shard has " + std::to_string(got) + " rows but this sharding of " +
                                                std::to_string(total) + " rows over " + std::to_string(r.P) +
                                                " ranks gives it " + std::to_string(want) + ".");
        }
        if (shard.v.shape[2] != shard.k.shape[2])
            throw InvalidArgument("v", "its shard has " + std::to_string(shard.v.shape[2]) + " rows but k's has " +
                                           std::to_string(shard.k.shape[2]) + ".");
        // The largest message: a K/V shard, or its gradient's fp32 accumulator (the backward's).
        const std::int64_t most = *std::max_element(r.k_rows.begin(), r.k_rows.end());
        const std::uint64_t widest = std::max({storage_bytes(shard.k.dtype, shard.k.shape[3]), storage_bytes(shard.v.dtype, shard.v.shape[3]),
                                               std::uint64_t{4} * static_cast<std::uint64_t>(std::max(shard.k.shape[3], shard.v.shape[3]))});
        if (widest * static_cast<std::uint64_t>(shard.k.shape[0] * shard.k.shape[1] * most) > kPiece * kPieces)
            throw InvalidArgument("k", "a rank's K/V shard (or its gradient) passes " + std::to_string(kPieces) +
                                           " GiB, the most one ring message carries; use more ranks.");
        // The engine's own checks, on this rank's first pair with its own K/V shard (every pair
        // shares them but the rows).
        const Segment qs = r.q_segments[0];
        const Segment ks = r.key_segments(r.me)[0];  // a copy: key_segments returns a new vector
        PairInputs first(r, shard, shard.k, shard.v, 0, qs, 0, ks);
        first.in.sinks = shard.sinks;  // resolve() checks them (one per query head)
        check(r, first.in, r.block_options(options, qs, ks));
    }, ring.timeout_s);
    r.comm_owner->quiet = true;  // every collective completed; the ring's traffic says otherwise while it runs
    if (error) std::rethrow_exception(error);
    return r;
}

namespace {

// A K or V shard as one contiguous [B, H, n, D] buffer, row after row (any storage type), to send.
std::vector<std::uint8_t> pack(const TensorView& t, std::int64_t capacity_rows) {
    const auto [B, H, N, D] = t.shape;
    const std::uint64_t row = storage_bytes(t.dtype, D);
    std::vector<std::uint8_t> out(static_cast<std::size_t>(row * static_cast<std::uint64_t>(B * H * capacity_rows)));
    std::uint8_t* to = out.data();
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t n = 0; n < N; ++n, to += row)
                std::memcpy(to, static_cast<const std::uint8_t*>(t.data) + storage_bytes(t.dtype, t.offset(b, h, n, 0)), row);
    return out;
}

}  // namespace

KvRing::KvRing(const RingSetup& setup, const TensorView& k, const TensorView& v)
    : setup_(setup), shape_{k, v}, buffers_(std::make_shared<Buffers>()) {
    const std::int64_t most = *std::max_element(setup.k_rows.begin(), setup.k_rows.end());
    for (std::size_t which = 0; which < 2; ++which) {
        (*buffers_)[which][0] = pack(shape_[which], most);
        (*buffers_)[which][1].resize((*buffers_)[which][0].size());
    }
}

TensorView KvRing::held(int step, int which) const {
    const TensorView& t = shape_[static_cast<std::size_t>(which)];
    const std::int64_t rows = setup_.k_rows[static_cast<std::size_t>(setup_.holder(step))];
    return make_view<const void*>((*buffers_)[static_cast<std::size_t>(which)][static_cast<std::size_t>(step % 2)].data(),
                                  t.dtype, Layout::bhnd, {t.shape[0], t.shape[1], rows, t.shape[3]});
}

void KvRing::post(int step, std::vector<MPI_Request>& requests, std::uint64_t& bytes_sent) {
    if (step + 1 >= setup_.P) return;
    const std::int64_t incoming = setup_.k_rows[static_cast<std::size_t>(setup_.holder(step + 1))];
    for (int which = 0; which < 2; ++which) {
        const TensorView& t = shape_[static_cast<std::size_t>(which)];
        const std::uint64_t row = storage_bytes(t.dtype, t.shape[3]) * static_cast<std::uint64_t>(t.shape[0] * t.shape[1]);
        auto& bufs = (*buffers_)[static_cast<std::size_t>(which)];
        const TensorView now = held(step, which);
        post_exchange(setup_, step, which == 0 ? Carried::k : Carried::v,
                      {bufs[static_cast<std::size_t>(step % 2)].data(), static_cast<std::size_t>(row * static_cast<std::uint64_t>(now.shape[2]))},
                      {bufs[static_cast<std::size_t>(1 - step % 2)].data(), static_cast<std::size_t>(row * static_cast<std::uint64_t>(incoming))},
                      requests, bytes_sent);
    }
}

void post_exchange(const RingSetup& setup, int step, Carried what, std::span<const std::uint8_t> send,
                   std::span<std::uint8_t> receive, std::vector<MPI_Request>& requests, std::uint64_t& bytes_sent) {
    const std::uint64_t most = std::max(send.size(), receive.size());
    for (std::uint64_t at = 0, piece = 0; at < most; at += kPiece, ++piece) {
        // Below MPI's smallest allowed tag bound, 32767: 128 steps × 4 kinds × 64 pieces.
        const int tag = static_cast<int>(((static_cast<std::uint64_t>(step % 128) * 4 + static_cast<std::uint64_t>(what)) * kPieces + piece));
        if (at < send.size()) {
            const auto count = static_cast<int>(std::min<std::uint64_t>(kPiece, send.size() - at));
            requests.emplace_back();
            check_mpi(MPI_Isend(send.data() + at, count, MPI_BYTE, setup.next(), tag, setup.comm, &requests.back()),
                      "sending to the next rank");
            bytes_sent += static_cast<std::uint64_t>(count);
        }
        if (at < receive.size()) {
            requests.emplace_back();
            check_mpi(MPI_Irecv(receive.data() + at, static_cast<int>(std::min<std::uint64_t>(kPiece, receive.size() - at)),
                                MPI_BYTE, setup.previous(), tag, setup.comm, &requests.back()),
                      "receiving from the previous rank");
        }
    }
}

}  // namespace vkattn::distributed::detail

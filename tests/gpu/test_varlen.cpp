// Variable-length batches (DeviceVarlen, FlashAttention's varlen): sequences of different lengths
// packed without padding, queries and keys alike or queries over a KV cache. Every sequence's rows
// are checked against the CPU reference run on that sequence alone; the outputs start as NaN (the
// suite's context poisons them), so a row the kernels skip cannot pass.
#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>

#include "support/cache_support.hpp"
#include "support/gpu_context.hpp"
#include "support/varlen_support.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/host_kv_cache.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using vkattn::test::cu_tensor;
using vkattn::test::offsets_of;

namespace {

// A packed host tensor [1, H, total, D] in FlashAttention's layout ([total, H, D]: bnhd).
HostTensor packed(std::mt19937& rng, DType dtype, std::int64_t H, std::int64_t total, std::int64_t D) {
    return random_tensor(rng, dtype, Layout::bnhd, {1, H, std::max<std::int64_t>(total, 1), D});
}

// Rows [first, first + n) of a packed host tensor as fp32 [1, H, n, D] (bhnd).
HostTensor rows_f32(const HostTensor& t, std::int64_t first, std::int64_t n) {
    HostTensor out = nan_tensor(DType::f32, Layout::bhnd, {1, t.shape[1], n, t.shape[3]});
    for (std::int64_t h = 0; h < t.shape[1]; ++h)
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t d = 0; d < t.shape[3]; ++d)
                out.f32[static_cast<std::size_t>(out.view().offset(0, h, i, d))] = t.at(0, h, first + i, d);
    return out;
}

struct Downloaded {
    HostTensor o, lse;
};

// Sequence b's output and lse rows (from packed row `first`) against the reference over its own
// queries and keys; a sequence without keys gives zeros and an lse of -inf.
void check_sequence(const Downloaded& got, const HostTensor& q, std::int64_t q_first, std::int64_t nq, const HostTensor& k,
                    const HostTensor& v, std::int64_t nk, const AttentionOptions& options, const AttentionInputs& extra,
                    DType dtype, const std::string& what) {
    if (nq == 0) return;
    const std::int64_t Hq = q.shape[1], Dv = v.shape[3];
    std::vector<float> ref(static_cast<std::size_t>(Hq * nq * Dv), 0.0f), ref_lse(static_cast<std::size_t>(Hq * nq), -INFINITY);
    const HostTensor q32 = rows_f32(q, q_first, nq);
    if (nk > 0) {
        AttentionInputs in = extra;
        in.q = q32.view();
        in.k = k.view();
        in.v = v.view();
        reference_attention(in,
                            {.o = make_view<void*>(ref.data(), DType::f32, Layout::bhnd, {1, Hq, nq, Dv}),
                             .lse = ref_lse.data()},
                            options);
    }
    std::vector<double> o, lse;
    for (std::int64_t h = 0; h < Hq; ++h)
        for (std::int64_t i = 0; i < nq; ++i) {
            for (std::int64_t d = 0; d < Dv; ++d) o.push_back(got.o.at(0, h, q_first + i, d));
            lse.push_back(got.lse.at(0, h, q_first + i, 0));
        }
    // ref is [1, Hq, nq, Dv] bhnd: the same (h, i, d) order.
    const Comparison co = compare(o, {ref.begin(), ref.end()}, tolerance_for(dtype));
    INFO(what << " o: " << co.message);
    REQUIRE(co.ok);
    const Comparison cl = compare_lse(lse, {ref_lse.begin(), ref_lse.end()});
    INFO(what << " lse: " << cl.message);
    REQUIRE(cl.ok);
}

Downloaded download(const DeviceTensor& o, const DeviceTensor& lse) {
    Downloaded d{nan_tensor(o.dtype(), Layout::bhnd, o.shape()), nan_tensor(DType::f32, Layout::bhnd, lse.shape())};
    o.download(d.o.mutable_view());
    lse.download(d.lse.mutable_view());
    return d;
}

}  // namespace

TEST_CASE("varlen: packed sequences of different lengths match the reference per sequence", "[gpu][varlen]") {
    Context& ctx = test::gpu_context();
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    const Causal causal = GENERATE(Causal::none, Causal::top_left, Causal::bottom_right);
    // The streamed and the shared-memory flash kernels, the decode kernel (split runs only), the
    // tile kernel and the cooperative-matrix one (f16 storage: what it multiplies is then what is
    // stored), with one row tile per subgroup and with two (5).
    const int kernel = GENERATE(0, 1, 2, 3, 4, 5);
    if (kernel == 2 && impl != Impl::split) return;
    if (kernel >= 4 && dtype != DType::f16) return;
    std::mt19937 rng(101);
    // Sequence 1 has no queries, sequence 5 no keys; max_seqlen_q is above every length. Three spare
    // query rows (two key rows) follow the last sequence: nothing may write them.
    const std::vector<std::int64_t> len_q{7, 0, 19, 1, 33, 3}, len_k{9, 5, 19, 40, 33, 0};
    const std::int64_t Hq = 6, Hkv = 2, Dk = 40, Dv = 24, max_q = 36, max_k = 40, spare_q = 3, spare_k = 2;
    const auto cu_q = offsets_of(len_q), cu_k = offsets_of(len_k);
    const std::int64_t rows_q = cu_q.back() + spare_q, rows_k = cu_k.back() + spare_k;
    const HostTensor q = packed(rng, dtype, Hq, rows_q, Dk);
    const HostTensor k = packed(rng, dtype, Hkv, rows_k, Dk), v = packed(rng, dtype, Hkv, rows_k, Dv);
    const DeviceTensor o = DeviceTensor::empty(ctx, dtype, {1, Hq, rows_q, Dv}, Layout::bnhd);
    const DeviceTensor lse = DeviceTensor::empty(ctx, DType::f32, {1, Hq, rows_q, 1});
    const DeviceTensor offsets_q = cu_tensor(ctx, cu_q), offsets_k = cu_tensor(ctx, cu_k);
    const DeviceAttentionInputs in{.q = DeviceTensor::from_host(ctx, q.view(), Layout::bnhd),
                                   .k = DeviceTensor::from_host(ctx, k.view(), Layout::bnhd),
                                   .v = DeviceTensor::from_host(ctx, v.view(), Layout::bnhd),
                                   .varlen = {.cu_seqlens_q = offsets_q, .cu_seqlens_k = offsets_k, .max_seqlen_q = max_q,
                                              .max_seqlen_k = max_k}};
    const VariantOverrides variant = kernel == 2   ? VariantOverrides{.fused_kernel = FusedKernel::decode}
                                     : kernel == 3 ? VariantOverrides{.fused_kernel = FusedKernel::tile}
                                     : kernel == 4 ? VariantOverrides{.fused_kernel = FusedKernel::coopmat}
                                     : kernel == 5 ? VariantOverrides{.fused_kernel = FusedKernel::coopmat, .row_tiles = 2}
                                                   : VariantOverrides{.shared_tiles = kernel == 1};
    const AttentionOptions options{.causal = causal, .impl = impl, .variant = variant};
    const AttentionPlan plan(ctx, in, {.o = o, .lse = lse}, options);
    CHECK(plan.report().path == impl);
    if (kernel == 5) CHECK_THAT(plan.report().variant, Catch::Contains(" rt2 "));
    CHECK_THAT(plan.report().variant, Catch::StartsWith(kernel == 2   ? "decode["
                                                                  : kernel == 3 ? "tile["
                                                                  : kernel >= 4 ? "coopmat["
                                                                                : "fused["));
    // The same plan over other offsets, written into the same tensors: the offsets live on the device.
    const std::vector<std::int64_t> len_q2{33, 3, 7, 0, 19, 1}, len_k2{33, 0, 9, 5, 19, 40};
    for (const auto& [lq, lk] : {std::pair{len_q, len_k}, std::pair{len_q2, len_k2}}) {
        const auto cq = offsets_of(lq), ck = offsets_of(lk);
        Batch batch(ctx);
        batch.upload(offsets_q, make_view(static_cast<const void*>(cq.data()), DType::i32, Layout::bhnd, offsets_q.shape()));
        batch.upload(offsets_k, make_view(static_cast<const void*>(ck.data()), DType::i32, Layout::bhnd, offsets_k.shape()));
        plan.run(batch, in, {.o = o, .lse = lse});
        batch.submit().wait();
        const Downloaded got = download(o, lse);
        for (std::size_t b = 0; b < lq.size(); ++b) {
            const HostTensor kb = rows_f32(k, ck[b], std::max<std::int64_t>(lk[b], 1));
            const HostTensor vb = rows_f32(v, ck[b], std::max<std::int64_t>(lk[b], 1));
            check_sequence(got, q, cq[b], lq[b], kb, vb, lk[b], options, {}, dtype,
                           to_string(dtype) + " " + plan.report().variant + " " + to_string(causal) + " sequence " +
                               std::to_string(b));
        }
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t i = cq.back(); i < rows_q; ++i) {
                INFO("spare row " << i << " of head " << h);
                REQUIRE(std::isnan(got.o.at(0, h, i, 0)));
                REQUIRE(std::isnan(got.lse.at(0, h, i, 0)));
            }
    }
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("varlen: bit for bit the padded batch with key lengths", "[gpu][varlen]") {
    Context& ctx = test::gpu_context();
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    const Causal causal = GENERATE(Causal::none, Causal::top_left);  // bottom-right aligns differently when padded
    const double dropout = GENERATE(0.0, 0.3);  // drawn with the sequence as b and its own i and j
    std::mt19937 rng(104);
    const std::vector<std::int64_t> len_q{11, 3, 24}, len_k{30, 3, 17};
    const std::int64_t B = 3, Hq = 4, Hkv = 2, D = 32, max_q = 24, max_k = 30;
    const auto cu_q = offsets_of(len_q), cu_k = offsets_of(len_k);
    const HostTensor q = packed(rng, DType::f32, Hq, cu_q.back(), D), k = packed(rng, DType::f32, Hkv, cu_k.back(), D),
                     v = packed(rng, DType::f32, Hkv, cu_k.back(), D);
    // The same rows padded into [B, max, H, D] (bnhd), zeros past each sequence.
    auto pad = [&](const HostTensor& t, const std::vector<std::int32_t>& cu, const std::vector<std::int64_t>& lens, std::int64_t n) {
        HostTensor out = zero_tensor(DType::f32, Layout::bnhd, {B, t.shape[1], n, D});
        for (std::int64_t b = 0; b < B; ++b)
            for (std::int64_t h = 0; h < t.shape[1]; ++h)
                for (std::int64_t i = 0; i < lens[static_cast<std::size_t>(b)]; ++i)
                    for (std::int64_t d = 0; d < D; ++d)
                        out.f32[static_cast<std::size_t>(out.view().offset(b, h, i, d))] = t.at(0, h, cu[static_cast<std::size_t>(b)] + i, d);
        return out;
    };
    const AttentionOptions options{.causal = causal, .dropout = dropout, .seed = 99, .impl = impl};
    const DeviceTensor o = DeviceTensor::empty(ctx, DType::f32, {1, Hq, cu_q.back(), D}, Layout::bnhd);
    attention(ctx,
              {.q = DeviceTensor::from_host(ctx, q.view(), Layout::bnhd), .k = DeviceTensor::from_host(ctx, k.view(), Layout::bnhd),
               .v = DeviceTensor::from_host(ctx, v.view(), Layout::bnhd),
               .varlen = {.cu_seqlens_q = cu_tensor(ctx, cu_q), .cu_seqlens_k = cu_tensor(ctx, cu_k), .max_seqlen_q = max_q,
                          .max_seqlen_k = max_k}},
              {.o = o}, options);
    std::vector<std::int32_t> lengths(len_k.begin(), len_k.end());
    const DeviceTensor o_padded = DeviceTensor::empty(ctx, DType::f32, {B, Hq, max_q, D}, Layout::bnhd);
    attention(ctx,
              {.q = DeviceTensor::from_host(ctx, pad(q, cu_q, len_q, max_q).view(), Layout::bnhd),
               .k = DeviceTensor::from_host(ctx, pad(k, cu_k, len_k, max_k).view(), Layout::bnhd),
               .v = DeviceTensor::from_host(ctx, pad(v, cu_k, len_k, max_k).view(), Layout::bnhd),
               .kv_lengths = DeviceTensor::from_host(ctx, make_view(static_cast<const void*>(lengths.data()), DType::i32,
                                                                    Layout::bhnd, {B, 1, 1, 1}))},
              {.o = o_padded}, options);
    const Downloaded packed_o = download(o, DeviceTensor::empty(ctx, DType::f32, {1, 1, 1, 1}));
    HostTensor padded_o = nan_tensor(DType::f32, Layout::bhnd, {B, Hq, max_q, D});
    o_padded.download(padded_o.mutable_view());
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t i = 0; i < len_q[static_cast<std::size_t>(b)]; ++i)
                for (std::int64_t d = 0; d < D; ++d) {
                    const float a = packed_o.o.at(0, h, cu_q[static_cast<std::size_t>(b)] + i, d), p = padded_o.at(b, h, i, d);
                    INFO("sequence " << b << " head " << h << " row " << i << " column " << d);
                    REQUIRE(std::memcmp(&a, &p, sizeof a) == 0);
                }
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("varlen: windows, softcap, ALiBi and sinks apply per sequence", "[gpu][varlen]") {
    Context& ctx = test::gpu_context();
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    std::mt19937 rng(102);
    const std::vector<std::int64_t> lens{13, 70, 2, 41};  // self-attention: q and k alike
    const std::int64_t H = 4, D = 32;
    const auto cu = offsets_of(lens);
    const HostTensor q = packed(rng, DType::f32, H, cu.back(), D), k = packed(rng, DType::f32, H, cu.back(), D),
                     v = packed(rng, DType::f32, H, cu.back(), D);
    const DeviceTensor offsets = cu_tensor(ctx, cu);
    const std::vector<float> sinks{0.5f, -1.0f, 2.0f, -INFINITY};
    const DeviceAttentionInputs in{.q = DeviceTensor::from_host(ctx, q.view(), Layout::bnhd),
                                   .k = DeviceTensor::from_host(ctx, k.view(), Layout::bnhd),
                                   .v = DeviceTensor::from_host(ctx, v.view(), Layout::bnhd),
                                   .sinks = sinks,
                                   .varlen = {.cu_seqlens_q = offsets, .cu_seqlens_k = offsets, .max_seqlen_q = 70,
                                              .max_seqlen_k = 70}};
    const DeviceTensor o = DeviceTensor::empty(ctx, DType::f32, {1, H, cu.back(), D}, Layout::bnhd);
    const DeviceTensor lse = DeviceTensor::empty(ctx, DType::f32, {1, H, cu.back(), 1});
    const AttentionOptions options{.causal = Causal::bottom_right, .window = {20, 0}, .softcap = 15.0,
                                   .alibi_max_bias = 8.0, .impl = impl};
    attention(ctx, in, {.o = o, .lse = lse}, options);
    const Downloaded got = download(o, lse);
    for (std::size_t b = 0; b < lens.size(); ++b)
        check_sequence(got, q, cu[b], lens[b], rows_f32(k, cu[b], lens[b]), rows_f32(v, cu[b], lens[b]), lens[b], options,
                       {.sinks = sinks}, DType::f32, "sequence " + std::to_string(b));
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("varlen: packed queries over a KV cache (chunked prefill), contiguous and paged", "[gpu][varlen][cache]") {
    Context& ctx = test::gpu_context();
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const bool paged = GENERATE(false, true);
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    std::mt19937 rng(103);
    const std::int64_t B = 3, Hq = 4, Hkv = 2, D = 16, capacity = 64;
    HostKvCache host(dtype, B, Hkv, capacity, D, D);
    std::optional<KvCache> contiguous;
    std::optional<PagedKvCache> blocks;
    if (paged) blocks.emplace(ctx, PagedKvCacheOptions{.batch = B, .kv_heads = Hkv, .num_blocks = 16, .block_size = 6, .dim = D, .dtype = dtype});
    else contiguous.emplace(ctx, KvCacheOptions{.batch = B, .kv_heads = Hkv, .capacity = capacity, .dim = D, .dtype = dtype});
    // Two chunks per sequence, each appended packed (the first leaves sequence 1 empty); the second
    // chunk's queries attend over everything so far.
    auto append_chunk = [&](const std::vector<std::int64_t>& lens) {
        const auto cu = offsets_of(lens);
        const HostTensor k_pack = packed(rng, dtype, Hkv, cu.back(), D), v_pack = packed(rng, dtype, Hkv, cu.back(), D);
        Batch batch(ctx);
        const DeviceTensor k_new = DeviceTensor::from_host(ctx, k_pack.view(), Layout::bnhd);
        const DeviceTensor v_new = DeviceTensor::from_host(ctx, v_pack.view(), Layout::bnhd);
        if (paged) blocks->append_packed(batch, k_new, v_new, cu);
        else contiguous->append_packed(batch, k_new, v_new, cu);
        batch.submit().wait();
        // The host model takes [B, Hkv, longest, D] rows with counts.
        const std::int64_t longest = *std::max_element(lens.begin(), lens.end());
        HostTensor k_rows = zero_tensor(dtype, Layout::bhnd, {B, Hkv, longest, D}), v_rows = k_rows;
        for (std::int64_t b = 0; b < B; ++b)
            for (std::int64_t h = 0; h < Hkv; ++h)
                for (std::int64_t t = 0; t < lens[static_cast<std::size_t>(b)]; ++t)
                    for (std::int64_t d = 0; d < D; ++d)
                        for (auto [to, from] : {std::pair{&k_rows, &k_pack}, std::pair{&v_rows, &v_pack}}) {
                            const auto at = static_cast<std::size_t>(to->view().offset(b, h, t, d));
                            const auto src = static_cast<std::size_t>(from->view().offset(0, h, cu[static_cast<std::size_t>(b)] + t, d));
                            if (dtype == DType::f32) to->f32[at] = from->f32[src];
                            else to->f16[at] = from->f16[src];
                        }
        const std::vector<std::int32_t> counts(lens.begin(), lens.end());
        host.append(k_rows, v_rows, counts);
    };
    append_chunk({9, 0, 4});
    const std::vector<std::int64_t> len_q{5, 17, 1};
    append_chunk(len_q);
    if (!paged) {  // the appends are exact
        CHECK(test::download_floats(contiguous->k()) == test::floats_of(host.k));
        CHECK(test::download_floats(contiguous->v()) == test::floats_of(host.v));
    }
    const auto cu_q = offsets_of(len_q);
    const HostTensor q = packed(rng, dtype, Hq, cu_q.back(), D);
    const DeviceTensor dq = DeviceTensor::from_host(ctx, q.view(), Layout::bnhd);
    const DeviceTensor o = DeviceTensor::empty(ctx, dtype, {1, Hq, cu_q.back(), D}, Layout::bnhd);
    const DeviceTensor lse = DeviceTensor::empty(ctx, DType::f32, {1, Hq, cu_q.back(), 1});
    DeviceAttentionInputs in = paged ? blocks->inputs(dq) : contiguous->inputs(dq);
    in.varlen = {.cu_seqlens_q = cu_tensor(ctx, cu_q), .max_seqlen_q = 17};
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = impl};
    const AttentionPlan plan(ctx, in, {.o = o, .lse = lse}, options);
    Batch batch(ctx);
    plan.run(batch, in, {.o = o, .lse = lse});
    batch.submit().wait();
    const Downloaded got = download(o, lse);
    for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t n = host.lengths[static_cast<std::size_t>(b)];
        HostTensor kb = nan_tensor(DType::f32, Layout::bhnd, {1, Hkv, n, D}), vb = kb;
        for (std::int64_t h = 0; h < Hkv; ++h)
            for (std::int64_t j = 0; j < n; ++j)
                for (std::int64_t d = 0; d < D; ++d) {
                    const auto at = static_cast<std::size_t>(kb.view().offset(0, h, j, d));
                    kb.f32[at] = host.k.at(b, h, j, d);
                    vb.f32[at] = host.v.at(b, h, j, d);
                }
        check_sequence(got, q, cu_q[static_cast<std::size_t>(b)], len_q[static_cast<std::size_t>(b)], kb, vb, n, options,
                       {}, dtype, std::string(paged ? "paged " : "") + to_string(dtype) + " sequence " + std::to_string(b));
    }
    CHECK(test::take_validation_messages(ctx).empty());
}

// Ring attention over MPI with vkattn: every rank holds a contiguous shard of a causal sequence
// (queries, keys and values), attends it to the whole sequence with the K/V shards passed round the
// ring, takes the gradients the same way, and checks its rows against the CPU reference of the
// whole. Run it as mpirun -np P ./ring (or alone: one rank).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include <vkattn/distributed.hpp>
#include <vkattn/vkattn.hpp>

int main(int argc, char** argv) {
    int provided = 0, rank = 0, ranks = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);  // a thread drives each step's transfer
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);

    // The whole: 2 heads, N = 12 per rank, head dimension 16; the same values on every rank.
    using vkattn::DType, vkattn::Layout;
    const std::int64_t B = 1, H = 2, n = 12, N = n * ranks, D = 16;
    auto whole = [&](float frequency, float phase) {
        std::vector<float> t(static_cast<std::size_t>(B * H * N * D));
        for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::sin(frequency * static_cast<float>(i) + phase);
        return t;
    };
    const std::vector<float> q = whole(0.10f, 0.0f), k = whole(0.07f, 0.5f), v = whole(0.05f, 1.0f), dout = whole(0.03f, 2.0f);
    auto view = [&](const std::vector<float>& t, std::int64_t first, std::int64_t rows) {  // rows of every head
        auto x = vkattn::make_view<const void*>(t.data() + first * D, DType::f32, Layout::bhnd, {B, H, rows, D});
        x.strides = {H * N * D, N * D, D, 1};
        return x;
    };
    const vkattn::AttentionInputs shard{.q = view(q, rank * n, n), .k = view(k, rank * n, n), .v = view(v, rank * n, n)};
    const vkattn::AttentionOptions options{.causal = vkattn::Causal::top_left};

    vkattn::Context context;
    std::vector<float> o(static_cast<std::size_t>(B * H * n * D)), lse(static_cast<std::size_t>(B * H * n));
    std::vector<float> dq(o.size()), dk(o.size()), dv(o.size());
    auto out_view = [&](std::vector<float>& t) { return vkattn::make_view<void*>(t.data(), DType::f32, Layout::bhnd, {B, H, n, D}); };
    namespace vd = vkattn::distributed;
    vd::ring_attention(MPI_COMM_WORLD, context, shard, {.o = out_view(o), .lse = lse.data()}, options);
    vd::ring_attention_backward(MPI_COMM_WORLD, context, shard, vkattn::make_view<const void*>(o.data(), DType::f32, Layout::bhnd, {B, H, n, D}),
                                lse, view(dout, rank * n, n), {.dq = out_view(dq), .dk = out_view(dk), .dv = out_view(dv)},
                                options);

    // The whole on the CPU; this rank's rows of it.
    const vkattn::AttentionInputs all{.q = view(q, 0, N), .k = view(k, 0, N), .v = view(v, 0, N)};
    std::vector<float> ro(q.size()), rdq(q.size()), rdk(q.size()), rdv(q.size());
    auto whole_view = [&](std::vector<float>& t) { return vkattn::make_view<void*>(t.data(), DType::f32, Layout::bhnd, {B, H, N, D}); };
    vkattn::reference_attention(all, {.o = whole_view(ro)}, options);
    vkattn::reference_attention_backward(all, view(dout, 0, N), {.dq = whole_view(rdq), .dk = whole_view(rdk), .dv = whole_view(rdv)},
                                         options);
    double worst = 0;
    for (const auto& [mine, ref] : {std::pair{&o, &ro}, std::pair{&dq, &rdq}, std::pair{&dk, &rdk}, std::pair{&dv, &rdv}})
        for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t i = 0; i < n; ++i)
                for (std::int64_t d = 0; d < D; ++d)
                    worst = std::fmax(worst, std::fabs((*mine)[static_cast<std::size_t>((h * n + i) * D + d)] -
                                                       (*ref)[static_cast<std::size_t>((h * N + rank * n + i) * D + d)]));
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        std::printf("ring attention over %d ranks on %s: max |ring - cpu| over o, dq, dk, dv = %.2e\n", ranks,
                    context.device().name.c_str(), worst);
    MPI_Finalize();
    return worst < 1e-4 ? 0 : 1;
}

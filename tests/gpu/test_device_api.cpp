// Device tensors, batches and plans: the embeddable engine's API. Every output starts as NaN (or a
// sentinel, where what must stay untouched is checked) and is compared with the CPU reference.
#include "support/catch.hpp"

#include <cmath>
#include <optional>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

std::vector<double> as_doubles(const HostTensor& t) {
    std::vector<double> out(static_cast<std::size_t>(t.count()));
    std::size_t i = 0;
    for (std::int64_t b = 0; b < t.shape[0]; ++b)
        for (std::int64_t h = 0; h < t.shape[1]; ++h)
            for (std::int64_t n = 0; n < t.shape[2]; ++n)
                for (std::int64_t d = 0; d < t.shape[3]; ++d) out[i++] = t.at(b, h, n, d);
    return out;
}

// A host view of part of a tensor: the device view's shape and strides, from element `first`.
template <class Pointer>
BasicTensorView<Pointer> sub_view(Pointer base, DType dtype, std::int64_t first, const DeviceTensor& like) {
    using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>, const char, char>;
    return {static_cast<Byte*>(base) + first * static_cast<std::int64_t>(size_of(dtype)), dtype, like.shape(),
            like.strides()};
}

}  // namespace

TEST_CASE("device tensors: uploads, views and downloads move exactly the elements", "[gpu][device]") {
    Context& ctx = test::gpu_context();
    std::mt19937 rng(11);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const Layout layout = GENERATE(Layout::bhnd, Layout::bnhd);
    const HostTensor host = random_tensor(rng, dtype, layout, {2, 3, 5, 7});
    const DeviceTensor t = DeviceTensor::from_host(ctx, host.view(), layout);
    CHECK(t.strides() == dense_strides(layout, host.shape));

    HostTensor back = nan_tensor(dtype, Layout::bhnd, host.shape);  // another layout on the host
    t.download(back.mutable_view());
    CHECK(as_doubles(back) == as_doubles(host));

    // A view of heads [1, 3) and positions [2, 5), downloaded alone.
    const DeviceTensor view = t.heads(1, 2).seq(2, 3);
    CHECK(view.shape() == std::array<std::int64_t, 4>{2, 2, 3, 7});
    HostTensor part = nan_tensor(dtype, Layout::bhnd, view.shape());
    view.download(part.mutable_view());
    for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t h = 0; h < 2; ++h)
            for (std::int64_t n = 0; n < 3; ++n)
                for (std::int64_t d = 0; d < 7; ++d) REQUIRE(part.at(b, h, n, d) == host.at(b, h + 1, n + 2, d));

    // Uploading into the view changes those elements and no others.
    const HostTensor fresh = random_tensor(rng, dtype, Layout::bhnd, view.shape());
    view.upload(fresh.view());
    t.download(back.mutable_view());
    for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t h = 0; h < 3; ++h)
            for (std::int64_t n = 0; n < 5; ++n)
                for (std::int64_t d = 0; d < 7; ++d) {
                    const bool inside = h >= 1 && n >= 2;
                    REQUIRE(back.at(b, h, n, d) == (inside ? fresh.at(b, h - 1, n - 2, d) : host.at(b, h, n, d)));
                }
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("device tensors: bad views and transfers name the argument", "[gpu][device]") {
    Context& ctx = test::gpu_context();
    const DeviceTensor t = DeviceTensor::empty(ctx, DType::f32, {1, 2, 4, 8});
    CHECK_THROWS_WITH(t.seq(3, 2), Catch::Contains("seq") && Catch::Contains("[3, 5)"));
    CHECK_THROWS_WITH(t.heads(0, 0), Catch::Contains("heads"));
    CHECK_THROWS_WITH(DeviceTensor().batch(0, 1), Catch::Contains("empty"));
    CHECK_THROWS_AS(DeviceTensor::empty(ctx, DType::f32, {1, 0, 4, 8}), InvalidArgument);
    std::vector<float> wrong(64);
    CHECK_THROWS_WITH(t.upload(make_view<const void*>(wrong.data(), DType::f32, Layout::bhnd, {1, 2, 8, 4})),
                      Catch::Contains("shape"));
    CHECK_THROWS_WITH(t.upload(make_view<const void*>(wrong.data(), DType::f16, Layout::bhnd, {1, 2, 4, 8})),
                      Catch::Contains("f16"));
    Context other(test::test_context_options());
    Batch batch(other);
    CHECK_THROWS_WITH(batch.upload(t, make_view<const void*>(wrong.data(), DType::f32, Layout::bhnd, {1, 2, 4, 8})),
                      Catch::Contains("another Context"));
}

namespace {

// Attention over a KV-cache-shaped problem on the device: K and V are [B, Hkv, capacity, D] with
// the lengths on the device, q is a head range of a larger tensor (its first element is not at
// the start of its memory), o a sequence range of a larger tensor whose other rows must stay as
// they were. Checked against the reference on the same host data.
struct DeviceCase {
    DType dtype = DType::f32;
    Impl impl = Impl::automatic;
    bool weights = false, lse = false, mask = false;
    std::optional<LogitsStage> logits;
    std::uint32_t splits = 0;
};

void run_device_case(Context& ctx, const DeviceCase& c, unsigned seed) {
    const std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 3, cap = 41, D = 24;
    std::mt19937 rng(seed);
    const HostTensor q_all = random_tensor(rng, c.dtype, Layout::bhnd, {B, Hq + 1, Nq, D});
    const HostTensor k = random_tensor(rng, c.dtype, Layout::bnhd, {B, Hkv, cap, D});
    const HostTensor v = random_tensor(rng, c.dtype, Layout::bnhd, {B, Hkv, cap, D});
    const std::vector<std::int32_t> lengths{29, 41};
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(Nq * cap), 1);
    for (std::size_t i = 0; i < mask.size(); i += 5) mask[i] = 0;

    const DeviceTensor dq_all = DeviceTensor::from_host(ctx, q_all.view());
    const DeviceTensor dq = dq_all.heads(1, Hq);
    const DeviceTensor dk = DeviceTensor::from_host(ctx, k.view(), Layout::bnhd);
    const DeviceTensor dv = DeviceTensor::from_host(ctx, v.view(), Layout::bnhd);
    const DeviceTensor dlen = DeviceTensor::from_host(
        ctx, make_view<const void*>(lengths.data(), DType::i32, Layout::bhnd, {1, 1, 1, B}));
    DeviceAttentionInputs in{.q = dq, .k = dk, .v = dv, .kv_lengths = dlen};
    if (c.mask)
        in.bool_mask = DeviceTensor::from_host(ctx, make_view<const void*>(mask.data(), DType::u8, Layout::bhnd, {1, 1, Nq, cap}));
    // o: rows [1, 1 + Nq) of a [B, Hq, Nq + 2, D] tensor that starts as a sentinel.
    const HostTensor sentinel = random_tensor(rng, c.dtype, Layout::bhnd, {B, Hq, Nq + 2, D});
    const DeviceTensor do_all = DeviceTensor::from_host(ctx, sentinel.view());
    DeviceAttentionOutputs out{.o = do_all.seq(1, Nq)};
    if (c.weights) out.weights = DeviceTensor::empty(ctx, DType::f32, {B, Hq, Nq, cap});
    if (c.lse) out.lse = DeviceTensor::empty(ctx, DType::f32, {B, Hq, Nq, 1});
    if (c.logits) out.logits = DeviceTensor::empty(ctx, DType::f32, {B, Hq, Nq, cap});
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = c.impl, .splits = c.splits,
                                   .logits_stage = c.logits.value_or(LogitsStage::masked)};

    const AttentionPlan plan(ctx, in, out, options);
    Batch batch(ctx);
    plan.run(batch, in, out);
    HostTensor o_all = nan_tensor(c.dtype, Layout::bhnd, sentinel.shape);
    std::vector<float> weights(static_cast<std::size_t>(B * Hq * Nq * cap), NAN), lse(static_cast<std::size_t>(B * Hq * Nq), NAN);
    std::vector<float> logits(weights.size(), NAN);
    batch.download(do_all, o_all.mutable_view());
    if (c.weights) batch.download(out.weights, make_view<void*>(weights.data(), DType::f32, Layout::bhnd, out.weights.shape()));
    if (c.lse) batch.download(out.lse, make_view<void*>(lse.data(), DType::f32, Layout::bhnd, out.lse.shape()));
    if (c.logits) batch.download(out.logits, make_view<void*>(logits.data(), DType::f32, Layout::bhnd, out.logits.shape()));
    batch.submit().wait();

    // The reference on the same host data, through the same views.
    HostTensor ref_o = nan_tensor(c.dtype, Layout::bhnd, {B, Hq, Nq, D});
    std::vector<float> ref_w(weights.size()), ref_lse(lse.size()), ref_logits(logits.size());
    AttentionInputs host_in{.q = sub_view(q_all.view().data, c.dtype, Nq * D, dq), .k = k.view(), .v = v.view(),
                            .kv_lengths = lengths};
    if (c.mask) host_in.bool_mask = MaskView{mask.data(), {Nq, cap}};
    reference_attention(host_in,
                        {.o = ref_o.mutable_view(), .weights = c.weights ? ref_w.data() : nullptr,
                         .lse = c.lse ? ref_lse.data() : nullptr, .logits = c.logits ? ref_logits.data() : nullptr},
                        options);
    std::vector<double> got, want;
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < Hq; ++h)
            for (std::int64_t n = 0; n < Nq + 2; ++n)
                for (std::int64_t d = 0; d < D; ++d) {
                    if (n == 0 || n == Nq + 1) {
                        REQUIRE(o_all.at(b, h, n, d) == sentinel.at(b, h, n, d));  // untouched
                        continue;
                    }
                    got.push_back(o_all.at(b, h, n, d));
                    want.push_back(ref_o.at(b, h, n - 1, d));
                }
    const Comparison cmp = compare(got, want, tolerance_for(c.dtype));
    INFO(plan.report().variant << ": " << cmp.message);
    CHECK(cmp.ok);
    if (c.weights) {
        const Comparison w = compare({weights.begin(), weights.end()}, {ref_w.begin(), ref_w.end()}, tolerance_for(DType::f32));
        INFO("weights: " << w.message);
        CHECK(w.ok);
    }
    if (c.logits) {
        const Comparison l = compare({logits.begin(), logits.end()}, {ref_logits.begin(), ref_logits.end()},
                                     tolerance_for(DType::f32));
        INFO("logits: " << l.message);
        CHECK(l.ok);
    }
    if (c.lse) {
        const Comparison l = compare_lse({lse.begin(), lse.end()}, {ref_lse.begin(), ref_lse.end()});
        INFO("lse: " << l.message);
        CHECK(l.ok);
    }
    if (c.impl != Impl::automatic) CHECK(plan.report().path == c.impl);
}

}  // namespace

TEST_CASE("plans: attention on device views, lengths on the device, against the reference", "[gpu][device][plan]") {
    Context& ctx = test::gpu_context();
    DeviceCase c;
    c.dtype = GENERATE(DType::f32, DType::f16);
    c.impl = GENERATE(Impl::unfused, Impl::fused, Impl::split);
    c.mask = GENERATE(false, true);
    c.weights = c.impl == Impl::unfused;
    if (c.impl == Impl::unfused) c.logits = c.mask ? LogitsStage::masked : LogitsStage::scaled;
    c.lse = true;
    c.splits = c.impl == Impl::split ? 3 : 0;
    run_device_case(ctx, c, 100 + static_cast<unsigned>(c.impl) * 7 + (c.mask ? 1 : 0));
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("plans: runs on the same tensors reuse their bindings and give the same bits", "[gpu][device][plan]") {
    Context& ctx = test::gpu_context();
    std::mt19937 rng(5);
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, 4, 1, 64});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 300, 64});
    const DeviceAttentionInputs in{.q = DeviceTensor::from_host(ctx, q.view()), .k = DeviceTensor::from_host(ctx, k.view()),
                                   .v = DeviceTensor::from_host(ctx, k.view())};
    const DeviceAttentionOutputs out{.o = DeviceTensor::empty(ctx, DType::f32, {1, 4, 1, 64})};
    const AttentionPlan plan(ctx, in, out);
    std::vector<std::vector<float>> results;
    for (int run = 0; run < 3; ++run) {
        Batch batch(ctx);
        plan.run(batch, in, out);
        std::vector<float> o(256, NAN);
        batch.download(out.o, make_view<void*>(o.data(), DType::f32, Layout::bhnd, {1, 4, 1, 64}));
        batch.submit().wait();
        results.push_back(o);
    }
    CHECK(plan.stats().runs == 3);
    CHECK(plan.stats().bindings_built == 1);
    CHECK(results[0] == results[1]);
    CHECK(results[1] == results[2]);
    // Other memory, the same shape: a second set of bindings.
    const DeviceAttentionOutputs other{.o = DeviceTensor::empty(ctx, DType::f32, {1, 4, 1, 64})};
    Batch batch(ctx);
    plan.run(batch, in, other);
    batch.submit().wait();
    CHECK(plan.stats().bindings_built == 2);
    // The device call finds the context's plan for this shape.
    const AttentionReport report = attention(ctx, in, out);
    CHECK(report.gpu_ms > 0);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("plans: tensors that do not fit the plan are named", "[gpu][device][plan]") {
    Context& ctx = test::gpu_context();
    const DeviceAttentionInputs in{.q = DeviceTensor::empty(ctx, DType::f32, {1, 2, 3, 8}),
                                   .k = DeviceTensor::empty(ctx, DType::f32, {1, 2, 5, 8}),
                                   .v = DeviceTensor::empty(ctx, DType::f32, {1, 2, 5, 8})};
    const DeviceAttentionOutputs out{.o = DeviceTensor::empty(ctx, DType::f32, {1, 2, 3, 8})};
    const AttentionPlan plan(ctx, in, out);
    Batch batch(ctx);
    auto with_q = [&](DeviceTensor q) { return DeviceAttentionInputs{.q = q, .k = in.k, .v = in.v}; };
    CHECK_THROWS_WITH(plan.run(batch, with_q(DeviceTensor::empty(ctx, DType::f32, {1, 2, 4, 8})), out),
                      Catch::Contains("q") && Catch::Contains("shape"));
    CHECK_THROWS_WITH(plan.run(batch, with_q(DeviceTensor::empty(ctx, DType::f32, {1, 2, 3, 8}, Layout::bnhd)), out),
                      Catch::Contains("strides"));
    CHECK_THROWS_WITH(plan.run(batch, with_q(DeviceTensor::empty(ctx, DType::f16, {1, 2, 3, 8})), out),
                      Catch::Contains("dtype"));
    DeviceAttentionInputs extra = in;
    extra.kv_lengths = DeviceTensor::empty(ctx, DType::i32, {1, 1, 1, 1});
    CHECK_THROWS_WITH(plan.run(batch, extra, out), Catch::Contains("kv_lengths") && Catch::Contains("without"));
    CHECK_THROWS_WITH(AttentionPlan(ctx, with_q(DeviceTensor::empty(ctx, DType::i32, {1, 2, 3, 8})), out),
                      Catch::Contains("f32, f16 or bf16"));
    CHECK_THROWS_AS(AttentionPlan(ctx, with_q(DeviceTensor()), out), InvalidArgument);
    CHECK(test::take_validation_messages(ctx).empty());
}

TEST_CASE("batches: several submissions in flight, polled and waited out of order", "[gpu][device][batch]") {
    Context& ctx = test::gpu_context();
    std::mt19937 rng(21);
    const std::int64_t n = 6;
    std::vector<HostTensor> qs;
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n), std::vector<float>(2 * 17 * 16, NAN));
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 33, 16});
    const DeviceTensor dk = DeviceTensor::from_host(ctx, k.view());
    std::vector<Submission> submissions;
    std::vector<DeviceTensor> outs;
    for (std::int64_t i = 0; i < n; ++i) {
        qs.push_back(random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 17, 16}));
        Batch batch(ctx);
        const DeviceTensor q = DeviceTensor::empty(ctx, DType::f32, {1, 2, 17, 16});
        outs.push_back(DeviceTensor::empty(ctx, DType::f32, {1, 2, 17, 16}));
        batch.upload(q, qs.back().view());  // the host copy is taken now
        const DeviceAttentionInputs in{.q = q, .k = dk, .v = dk};
        const AttentionPlan plan(ctx, in, {.o = outs.back()});
        plan.run(batch, in, {.o = outs.back()});
        batch.download(outs.back(), make_view<void*>(results[static_cast<std::size_t>(i)].data(), DType::f32,
                                                     Layout::bhnd, {1, 2, 17, 16}));
        qs.back().f32.assign(qs.back().f32.size(), 1e9f);  // the batch must not read this
        submissions.push_back(batch.submit());
    }
    while (!submissions.front().done()) {
    }
    for (std::int64_t i = n - 1; i >= 0; --i) submissions[static_cast<std::size_t>(i)].wait();
    std::mt19937 replay(21);
    (void)random_tensor(replay, DType::f32, Layout::bhnd, {1, 2, 33, 16});
    for (std::int64_t i = 0; i < n; ++i) {
        const HostTensor q = random_tensor(replay, DType::f32, Layout::bhnd, {1, 2, 17, 16});
        HostTensor ref = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 17, 16});
        reference_attention({.q = q.view(), .k = k.view(), .v = k.view()}, {.o = ref.mutable_view()});
        const auto& got = results[static_cast<std::size_t>(i)];
        const Comparison c = compare({got.begin(), got.end()}, as_doubles(ref), tolerance_for(DType::f32));
        INFO("submission " << i << ": " << c.message);
        CHECK(c.ok);
        CHECK(submissions[static_cast<std::size_t>(i)].gpu_ms() >= 0);
    }
    const std::string messages = test::take_validation_messages(ctx);
    INFO(messages);
    CHECK(messages.empty());
}

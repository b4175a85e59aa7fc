// vkattn embedded in the caller's Vulkan application (vkattn/vulkan.hpp): a Context on the caller's
// instance, device and queue; the caller's buffers as tensors; batches recorded into the caller's
// command buffers, which the caller submits. The caller's instance runs the validation layer with its
// own messenger: any message fails. Outputs start as NaN; results are checked against the CPU
// reference.
#include "support/catch.hpp"

#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include "support/cache_support.hpp"
#include "support/device_tuning.hpp"
#include "support/own_vulkan.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/attention_case.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"
#include "vkattn/vulkan.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using vkattn::test::OwnVulkan;

namespace {

constexpr VkBufferUsageFlags kAllUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                                         VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

ContextOptions interop_options() {
    ContextOptions o;
    o.poison_outputs = true;
    return o;
}

// Q, K, V and O of one attention call, placed one after another in one of the caller's buffers at
// 256-byte boundaries (any device's storage offset alignment), Q/K/V written through its mapping.
struct CallerTensors {
    HostTensor q, k, v;
    OwnVulkan::Buffer buffer;
    std::uint64_t q_at = 0, k_at = 0, v_at = 0, o_at = 0;
    std::array<std::int64_t, 4> o_shape{};
    DType dtype = DType::f32;

    CallerTensors(OwnVulkan& own, std::mt19937& rng, DType dt, std::array<std::int64_t, 4> q_shape,
                  std::array<std::int64_t, 4> kv_shape, std::int64_t dv, VkBufferUsageFlags usage = kAllUsage)
        : q(random_tensor(rng, dt, Layout::bhnd, q_shape)), k(random_tensor(rng, dt, Layout::bhnd, kv_shape)),
          v(random_tensor(rng, dt, Layout::bhnd, {kv_shape[0], kv_shape[1], kv_shape[2], dv})),
          o_shape{q_shape[0], q_shape[1], q_shape[2], dv}, dtype(dt) {
        const std::uint64_t e = size_of(dt);
        auto next = [](std::uint64_t at, std::uint64_t bytes) { return (at + bytes + 255) / 256 * 256; };
        k_at = next(q_at, static_cast<std::uint64_t>(q.count()) * e);
        v_at = next(k_at, static_cast<std::uint64_t>(k.count()) * e);
        o_at = next(v_at, static_cast<std::uint64_t>(v.count()) * e);
        const std::uint64_t o_bytes = static_cast<std::uint64_t>(o_shape[0] * o_shape[1] * o_shape[2] * o_shape[3]) * e;
        buffer = own.buffer(o_at + o_bytes, usage);  // exactly as long as the tensors need
        auto* base = static_cast<std::byte*>(buffer.mapped);
        for (auto [t, at] : {std::pair{&q, q_at}, std::pair{&k, k_at}, std::pair{&v, v_at}})
            std::memcpy(base + at, dt == DType::f32 ? static_cast<const void*>(t->f32.data()) : t->f16.data(),
                        static_cast<std::size_t>(t->count()) * e);
    }

    DeviceAttentionInputs inputs(Context& ctx) const {
        return {.q = wrap(ctx, buffer.handle(), q_at, dtype, q.shape),
                .k = wrap(ctx, buffer.handle(), k_at, dtype, k.shape),
                .v = wrap(ctx, buffer.handle(), v_at, dtype, v.shape)};
    }
    DeviceAttentionOutputs outputs(Context& ctx) const { return {.o = wrap(ctx, buffer.handle(), o_at, dtype, o_shape)}; }

    // O as the caller reads it: through its mapping.
    std::vector<double> o_values() const {
        std::vector<double> out(static_cast<std::size_t>(o_shape[0] * o_shape[1] * o_shape[2] * o_shape[3]));
        const auto* base = static_cast<const std::byte*>(buffer.mapped) + o_at;
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (dtype == DType::f32) out[i] = reinterpret_cast<const float*>(base)[i];
            else out[i] = half_to_float(reinterpret_cast<const std::uint16_t*>(base)[i]);
        }
        return out;
    }

    void check(const AttentionOptions& options, const std::string& what) const {
        // The reference in f32 over the values the device read.
        auto f32 = [](const HostTensor& t) {
            HostTensor out = nan_tensor(DType::f32, Layout::bhnd, t.shape);
            for (std::size_t i = 0; i < out.f32.size(); ++i) out.f32[i] = t.dtype == DType::f32 ? t.f32[i] : half_to_float(t.f16[i]);
            return out;
        };
        const HostTensor q32 = f32(q), k32 = f32(k), v32 = f32(v);
        std::vector<float> ref(o_values().size());
        reference_attention({.q = q32.view(), .k = k32.view(), .v = v32.view()},
                            {.o = make_view<void*>(ref.data(), DType::f32, Layout::bhnd, o_shape)}, options);
        const Comparison cmp = compare(o_values(), {ref.begin(), ref.end()}, tolerance_for(dtype));
        INFO(what << ": " << cmp.message);
        REQUIRE(cmp.ok);
    }
};

// The caller's sequence around vkattn: a command buffer of its own, `record` (the caller's commands
// and a batch recording into it), the contract's barrier to the host, submit, wait, and the
// batch's work completed (downloads copied).
template <class Record>
void run_in_callers_commands(OwnVulkan& own, Context& ctx, Record&& record) {
    const VkCommandBuffer commands = own.begin();
    Batch batch = record_into(ctx, commands);
    record(batch, commands);
    RecordedWork work = batch.finish();
    OwnVulkan::barrier_to_host(commands);
    own.submit_and_wait(commands);
    work.complete();
}

}  // namespace

TEST_CASE("the caller's device: attention recorded into its command buffer matches the reference", "[gpu][vulkan]") {
    OwnVulkan own;
    Context ctx(own.handles(), interop_options());
    // The test device enables what the device offers, but for the newer extensions' features
    // (cooperative matrices, maximal reconvergence), which it leaves to the engine's own device.
    for (const auto& f : ctx.device().features_not_enabled) {
        INFO(f);
        CHECK((f.find("cooperativeMatrix") != std::string::npos || f.find("shaderMaximalReconvergence") != std::string::npos));
    }
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const Impl impl = GENERATE(Impl::automatic, Impl::fused, Impl::split, Impl::unfused);
    std::mt19937 rng(71);
    const CallerTensors t(own, rng, dtype, {2, 6, 5, 24}, {2, 2, 37, 24}, 20);
    const AttentionOptions options{.causal = Causal::bottom_right, .impl = impl};
    const AttentionPlan plan(ctx, t.inputs(ctx), t.outputs(ctx), options);

    run_in_callers_commands(own, ctx, [&](Batch& batch, VkCommandBuffer commands) {
        // The caller's own write before vkattn's: O filled with NaN by a transfer (vkattn's first
        // barrier orders it before the attention's writes).
        vkCmdFillBuffer(commands, t.buffer.buffer, t.o_at, VK_WHOLE_SIZE, dtype == DType::f32 ? 0x7fc00000u : 0x7e007e00u);
        plan.run(batch, t.inputs(ctx), t.outputs(ctx));
    });
    t.check(options, to_string(dtype) + " " + plan.report().variant);
    CHECK(own.take_messages().empty());
}

TEST_CASE("the caller's device: Batch::submit runs on its queue and shares its queue mutex", "[gpu][vulkan]") {
    OwnVulkan own;
    std::mutex queue_mutex;
    Context ctx(own.handles(&queue_mutex), interop_options());
    std::mt19937 rng(72);
    const CallerTensors t(own, rng, DType::f32, {1, 4, 9, 16}, {1, 4, 33, 16}, 16);
    const AttentionOptions options{.causal = Causal::top_left};

    attention(ctx, t.inputs(ctx), t.outputs(ctx), options);  // pipelines built: the run below only submits
    // While the caller holds its queue's mutex, vkattn's submission waits for it.
    std::unique_lock held(queue_mutex);
    auto run = std::async(std::launch::async, [&] { attention(ctx, t.inputs(ctx), t.outputs(ctx), options); });
    CHECK(run.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
    held.unlock();
    run.get();
    t.check(options, "submitted by vkattn");

    // Host data in and out through vkattn's own batches, on the caller's device.
    HostTensor back = nan_tensor(DType::f32, Layout::bhnd, t.q.shape);
    t.inputs(ctx).q.download(back.mutable_view());
    CHECK(back.f32 == t.q.f32);
    CHECK(own.take_messages().empty());
}

TEST_CASE("the caller's device: a decode step (cache append, attention, download) in its command buffer", "[gpu][vulkan][cache]") {
    OwnVulkan own;
    Context ctx(own.handles(), interop_options());
    const DType dtype = GENERATE(DType::f32, DType::f16);
    const bool paged = GENERATE(false, true);
    std::mt19937 rng(73);
    const std::int64_t B = 2, Hq = 4, Hkv = 2, D = 16, capacity = 48;
    HostKvCache host(dtype, B, Hkv, capacity, D, D);
    std::optional<KvCache> contiguous;
    std::optional<PagedKvCache> blocks;
    if (paged) blocks.emplace(ctx, PagedKvCacheOptions{.batch = B, .kv_heads = Hkv, .num_blocks = 8, .block_size = 7, .dim = D, .dtype = dtype});
    else contiguous.emplace(ctx, KvCacheOptions{.batch = B, .kv_heads = Hkv, .capacity = capacity, .dim = D, .dtype = dtype});
    const AttentionOptions options{.causal = Causal::bottom_right};
    const DeviceTensor q = DeviceTensor::empty(ctx, dtype, {B, Hq, 1, D});
    const DeviceTensor o = DeviceTensor::empty(ctx, dtype, {B, Hq, 1, D});
    auto inputs = [&] { return paged ? blocks->inputs(q) : contiguous->inputs(q); };
    const AttentionPlan plan(ctx, inputs(), {.o = o}, options);
    for (const std::int64_t T : {std::int64_t{19}, std::int64_t{1}, std::int64_t{1}}) {
        HostTensor k_host, v_host;
        const DeviceTensor k_new = test::rows_on_device(ctx, rng, dtype, B, Hkv, T, D, k_host);
        const DeviceTensor v_new = test::rows_on_device(ctx, rng, dtype, B, Hkv, T, D, v_host);
        const HostTensor q_host = random_tensor(rng, dtype, Layout::bhnd, {B, Hq, 1, D});
        HostTensor o_host = nan_tensor(dtype, Layout::bhnd, {B, Hq, 1, D});
        run_in_callers_commands(own, ctx, [&](Batch& batch, VkCommandBuffer) {
            batch.upload(q, q_host.view());
            if (paged) blocks->append(batch, k_new, v_new);
            else contiguous->append(batch, k_new, v_new);
            plan.run(batch, inputs(), {.o = o});
            batch.download(o, o_host.mutable_view());  // copied into o_host by complete()
        });
        host.append(k_host, v_host);
        test::check_step(q_host, o_host, host, options, std::string(paged ? "paged " : "") + to_string(dtype));
    }
    CHECK(own.take_messages().empty());
}

TEST_CASE("the caller's device: buffers without texel views or copies", "[gpu][vulkan]") {
    OwnVulkan own;
    Context ctx(own.handles(), interop_options());
    std::mt19937 rng(74);
    const CallerTensors t(own, rng, DType::f32, {1, 2, 7, 32}, {1, 2, 29, 32}, 32, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT);
    const AttentionOptions options{.impl = Impl::fused};
    // Scalar loads where the buffer has no texel views, chosen by the plan.
    const AttentionPlan plan(ctx, t.inputs(ctx), t.outputs(ctx), options);
    CHECK(plan.report().variant.find("texel") == std::string::npos);
    run_in_callers_commands(own, ctx, [&](Batch& batch, VkCommandBuffer) { plan.run(batch, t.inputs(ctx), t.outputs(ctx)); });
    t.check(options, plan.report().variant);

    // Forcing texels on it is refused, naming the tensor; so is a copy the buffer cannot take.
    AttentionOptions texel = options;
    texel.variant.texel_loads = true;
    CHECK_THROWS_WITH(AttentionPlan(ctx, t.inputs(ctx), t.outputs(ctx), texel),
                      Catch::StartsWith("q: ") && Catch::Contains("VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT"));
    HostTensor host = nan_tensor(DType::f32, Layout::bhnd, t.q.shape);
    CHECK_THROWS_WITH(t.inputs(ctx).q.download(host.mutable_view()),
                      Catch::StartsWith("from: ") && Catch::Contains("VK_BUFFER_USAGE_TRANSFER_SRC_BIT"));
    CHECK_THROWS_WITH(t.inputs(ctx).q.upload(t.q.view()),
                      Catch::StartsWith("to: ") && Catch::Contains("VK_BUFFER_USAGE_TRANSFER_DST_BIT"));
    // A plan made for texel-capable memory refuses a run over this buffer, naming the tensor.
    const DeviceTensor q2 = DeviceTensor::from_host(ctx, t.q.view()), k2 = DeviceTensor::from_host(ctx, t.k.view()),
                       v2 = DeviceTensor::from_host(ctx, t.v.view());
    const AttentionPlan texel_plan(ctx, {.q = q2, .k = k2, .v = v2}, t.outputs(ctx), options);
    if (texel_plan.report().variant.find("texel") != std::string::npos) {
        Batch b2(ctx);
        CHECK_THROWS_WITH(texel_plan.run(b2, {.q = t.inputs(ctx).q, .k = k2, .v = v2}, t.outputs(ctx)),
                          Catch::StartsWith("q: ") && Catch::Contains("texel"));
    } else {
        WARN("the device reads this plan with scalar loads: the refusal of a run without texel views is not exercised");
    }
    CHECK(own.take_messages().empty());
}

TEST_CASE("the caller's device: bad handles, tensors and batches name the argument", "[gpu][vulkan]") {
    OwnVulkan own;
    auto refused = [&](VulkanDevice d, const char* argument, ContextOptions options = {}) {
        try {
            Context ctx(d, options);
            FAIL("accepted a bad " << argument);
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == argument);
        }
    };
    VulkanDevice d = own.handles();
    d.create_info = nullptr;
    refused(d, "create_info");
    d = own.handles();
    d.api_version = VK_API_VERSION_1_1;
    refused(d, "api_version");
    d = own.handles();
    d.queue_family = 99;
    refused(d, "queue_family");
    d = own.handles();
    d.queue_index = 1;
    refused(d, "queue_index");
    d = own.handles();
    d.device = VK_NULL_HANDLE;
    refused(d, "device");
    refused(own.handles(), "device", {.device = "0"});
    refused(own.handles(), "validation", {.validation = true});

    Context ctx(own.handles(), interop_options());
    const OwnVulkan::Buffer buffer = own.buffer(1024, kAllUsage);
    CHECK_THROWS_WITH(wrap(ctx, buffer.handle(), 1000, DType::f32, {1, 1, 2, 4}), Catch::StartsWith("shape: "));
    CHECK_THROWS_WITH(wrap(ctx, buffer.handle(), 2, DType::f32, {1, 1, 1, 4}), Catch::StartsWith("offset: "));
    CHECK_THROWS_WITH(wrap(ctx, {buffer.buffer, 1024, VK_BUFFER_USAGE_TRANSFER_SRC_BIT}, 0, DType::f32, {1, 1, 1, 4}),
                      Catch::StartsWith("buffer: "));
    CHECK_THROWS_WITH(record_into(ctx, VK_NULL_HANDLE), Catch::StartsWith("commands: "));

    // A batch of the caller's is finished, not submitted, and the other way round.
    const VkCommandBuffer commands = own.begin();
    Batch external = record_into(ctx, commands);
    CHECK_THROWS_WITH(external.submit(), Catch::StartsWith("batch: ") && Catch::Contains("finish()"));
    Batch own_batch(ctx);
    CHECK_THROWS_WITH(own_batch.finish(), Catch::StartsWith("batch: ") && Catch::Contains("submit()"));
    own.submit_and_wait(commands);
    CHECK(own.take_messages().empty());
}

TEST_CASE("the caller's device: a batch dropped unfinished keeps what its commands use", "[gpu][vulkan]") {
    OwnVulkan own;
    std::mt19937 rng(75);
    const CallerTensors t(own, rng, DType::f32, {1, 2, 4, 8}, {1, 2, 11, 8}, 8);
    const AttentionOptions options{.impl = Impl::split};
    const VkCommandBuffer commands = own.begin();
    {
        Context ctx(own.handles(), interop_options());
        {
            // The plan, the batch and the tensors go before the commands run: the context keeps
            // what the commands use until it goes.
            const AttentionPlan plan(ctx, t.inputs(ctx), t.outputs(ctx), options);
            Batch batch = record_into(ctx, commands);
            plan.run(batch, t.inputs(ctx), t.outputs(ctx));
        }
        OwnVulkan::barrier_to_host(commands);
        own.submit_and_wait(commands);
        t.check(options, "unfinished batch");
    }
    CHECK(own.take_messages().empty());
}

TEST_CASE("the caller's device: without subgroup size control the fused kernel still runs or says why", "[gpu][vulkan]") {
    OwnVulkan own({.subgroup_size_control = false});
    Context ctx(own.handles(), interop_options());
    std::mt19937 rng(77);
    const CallerTensors t(own, rng, DType::f32, {1, 4, 6, 16}, {1, 2, 45, 16}, 16);
    const AttentionOptions options{.causal = Causal::bottom_right};
    const AttentionReport report = attention(ctx, t.inputs(ctx), t.outputs(ctx), options);
    t.check(options, report.variant);
    bool listed = false;
    for (const auto& f : ctx.device().features_not_enabled) listed |= f.find("subgroupSizeControl") != std::string::npos;
    CHECK(listed == own.size_control_offered);  // named exactly when the device offers it
    CHECK(own.take_messages().empty());
}

TEST_CASE("the caller's device: f16 on a device created without 16-bit storage names the feature", "[gpu][vulkan]") {
    OwnVulkan own({.storage_16bit = false});
    Context ctx(own.handles(), interop_options());
    if (!ctx.device().features_not_enabled.empty()) {  // the device offers 16-bit storage
        CHECK_THAT(ctx.device().features_not_enabled[0], Catch::Contains("storageBuffer16BitAccess"));
        CHECK_FALSE(ctx.device().fp16_storage);
        const DeviceTensor q = DeviceTensor::empty(ctx, DType::f16, {1, 1, 4, 8});
        try {
            AttentionPlan plan(ctx, {.q = q, .k = q, .v = q}, {.o = q});
            FAIL("an f16 plan was made without 16-bit storage");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "o");  // its 16-bit stores; the loads read words
            CHECK_THAT(e.what(), Catch::Contains("storageBuffer16BitAccess"));
        }
        // f16 and bf16 K/V with an f32 output need no 16-bit storage: they are read as words.
        const DeviceTensor q32 = DeviceTensor::empty(ctx, DType::f32, {1, 1, 4, 8});
        const DeviceTensor k16 = DeviceTensor::empty(ctx, DType::f16, {1, 1, 4, 8});
        const DeviceTensor vbf = DeviceTensor::empty(ctx, DType::bf16, {1, 1, 4, 8});
        CHECK_NOTHROW(AttentionPlan(ctx, {.q = q32, .k = k16, .v = vbf}, {.o = q32}));
        CHECK_THROWS_WITH(KvCache(ctx, {.batch = 1, .kv_heads = 1, .capacity = 8, .dim = 8, .dtype = DType::f16}),
                          Catch::StartsWith("dtype: ") && Catch::Contains("storageBuffer16BitAccess"));
    } else {
        WARN("the device offers no 16-bit storage: the refusal naming the feature is not exercised");
    }
    // f32 runs as ever.
    std::mt19937 rng(76);
    const CallerTensors t(own, rng, DType::f32, {1, 2, 3, 8}, {1, 2, 9, 8}, 8);
    attention(ctx, t.inputs(ctx), t.outputs(ctx));
    t.check({}, "f32 without 16-bit storage");
    CHECK(own.take_messages().empty());
}

TEST_CASE("the matrix units: used where the device enables them with their shape and this build has their shaders",
          "[gpu][vulkan][coopmat]") {
    // The suite's device decides what is checked: on lavapipe (no VK_KHR_cooperative_matrix) the
    // cooperative-matrix kernels are portable and nothing is said; on a GPU with the units, a context
    // without the validation layer runs them unless a reason is given.
    Context& ctx = test::gpu_context();
    const DeviceInfo& d = ctx.device();
    CHECK(d.matrix_units == test::device_caps().matrix_units);
    CHECK(d.bf16_matrix_units == test::device_caps().bf16_matrix_units);
    CHECK_FALSE((d.bf16_matrix_units && !d.matrix_units));
    if (d.cooperative_matrix.empty()) {
        CHECK_FALSE(d.matrix_units);
        CHECK(d.matrix_units_off.empty());
        CHECK(d.bf16_matrix_units_off.empty());
    } else {
        CHECK(d.matrix_units != !d.matrix_units_off.empty());
        CHECK(d.bf16_matrix_units != !d.bf16_matrix_units_off.empty());
    }
    // A forced cooperative-matrix product names which implementation ran.
    testing::Case c;
    c.Nq = c.Nkv = 20;
    c.Dk = c.Dv = 16;
    c.weights = false;
    c.variant.fused_kernel = FusedKernel::coopmat;
    const testing::CaseResult r = testing::run_case(ctx, c, 3);
    INFO(r.message);
    CHECK(r.ok);
    CHECK_THAT(r.report.variant, Catch::Contains(d.matrix_units ? " units]" : " portable]"));
}

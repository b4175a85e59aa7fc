// What the driver's compiler reports per kernel (vkattn/kernel_statistics.hpp): nothing unless a
// context asks; where the device reports statistics, every kernel the context built has its values.
// lavapipe reports none, so there the test checks the refusal path; a GPU's driver checks the rest.
#include "support/catch.hpp"

#include <cstdlib>
#include <random>

#include "support/gpu_context.hpp"
#include "vkattn/attention.hpp"
#include "vkattn/kernel_statistics.hpp"
#include "vkattn/testing/attention_case.hpp"

using namespace vkattn;
using namespace vkattn::test;
using namespace vkattn::testing;

namespace {

void run_small_attention(Context& ctx) {
    std::mt19937 rng(7);
    HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 33, 40});
    HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 47, 40});
    HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {1, 2, 47, 40});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, 2, 33, 40});
    attention(ctx, {.q = q.view(), .k = k.view(), .v = v.view()}, {.o = o.mutable_view()}, {.causal = Causal::top_left});
}

}  // namespace

TEST_CASE("kernel statistics: none unless asked; where the device reports them, each built kernel's values", "[gpu][device_api]") {
    if (std::getenv("VKATTN_KERNEL_STATISTICS") == nullptr) {
        Context& plain = gpu_context();
        run_small_attention(plain);
        CHECK_FALSE(kernel_statistics_captured(plain));
        CHECK(kernel_statistics(plain).empty());
        CHECK(take_validation_messages(plain).empty());
    }

    ContextOptions options = test_context_options();
    options.kernel_statistics = true;
    Context ctx(options);
    run_small_attention(ctx);
    const auto stats = kernel_statistics(ctx);
    INFO(ctx.device().name);
    if (!kernel_statistics_captured(ctx)) {
        CHECK(stats.empty());  // lavapipe: no VK_KHR_pipeline_executable_properties
        return;
    }
    REQUIRE_FALSE(stats.empty());
    for (const auto& k : stats) {
        INFO(k.kernel << " [" << k.constants << "] " << k.executable);
        CHECK_FALSE(k.kernel.empty());
        CHECK_FALSE(k.values.empty());
        for (const auto& v : k.values) CHECK_FALSE(v.name.empty());
    }
    CHECK(take_validation_messages(ctx).empty());
}

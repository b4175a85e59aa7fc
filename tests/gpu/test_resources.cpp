// Resource limits: a request larger than the device's memory is refused with both sizes named
// before anything is allocated; one that slips past planning is stopped at allocation with what it
// had allocated freed; either way the context serves the next, smaller request.
#include "support/catch.hpp"

#include <random>

#include "plan/program.hpp"
#include "runtime.hpp"
#include "support/expect_case.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

// A context whose per-request budget is 8 MiB, whatever the device has.
ContextOptions small_budget() {
    ContextOptions o = test::test_context_options();
    o.max_device_bytes = 8u << 20;
    return o;
}

}  // namespace

TEST_CASE("resources: a request over the device memory is refused before allocation and the context goes on",
          "[gpu][resources]") {
    Context context(small_budget());
    std::mt19937 rng(test::fresh_seed());
    const Impl impl = GENERATE(Impl::unfused, Impl::fused);
    // 4 heads of 2048 x 64 fp32: q, k, v and o alone are 8 MiB; the weights would be 64 MiB more.
    const std::int64_t H = 4, N = 2048, D = 64;
    const HostTensor q = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, N, D});
    const HostTensor k = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, N, D});
    const HostTensor v = random_tensor(rng, DType::f32, Layout::bhnd, {1, H, N, D});
    HostTensor o = nan_tensor(DType::f32, Layout::bhnd, {1, H, N, D});
    try {
        attention(context, {.q = q.view(), .k = k.view(), .v = v.view()}, {.o = o.mutable_view()}, {.impl = impl});
        FAIL("a request over the budget ran");
    } catch (const ResourceLimit& e) {
        const std::string message = e.what();
        CHECK_THAT(message, Catch::Contains("bytes of device memory"));
        CHECK_THAT(message, Catch::Contains(std::to_string(8u << 20)));  // the size available
        CHECK_THAT(message, Catch::Contains("nothing was allocated"));
    }
    CHECK(std::isnan(o.at(0, 0, 0, 0)));  // nothing was written
    // The same context runs a request that fits.
    Case small;
    small.Hq = small.Hkv = 2;
    small.Nq = small.Nkv = 100;
    small.Dk = small.Dv = 32;
    small.impl = impl;
    small.weights = impl == Impl::unfused;
    const CaseResult r = run_case(context, small, test::fresh_seed());
    INFO(r.message);
    CHECK(r.ok);
    CHECK(test::take_validation_messages(context).empty());
}

TEST_CASE("resources: an allocation past the budget is refused with the sizes and frees what it took",
          "[gpu][resources]") {
    Context context(small_budget());
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    {
        detail::Program program(runtime);
        program.scratch(6u << 20, "six MiB");
        try {
            program.scratch(4u << 20, "four more MiB");
            FAIL("an allocation over the budget succeeded");
        } catch (const ResourceLimit& e) {
            CHECK_THAT(e.what(), Catch::Contains("four more MiB"));
            CHECK_THAT(e.what(), Catch::Contains(std::to_string(8u << 20)));
        }
    }
    Case small;
    small.Nq = small.Nkv = 50;
    const CaseResult r = run_case(context, small, test::fresh_seed());
    INFO(r.message);
    CHECK(r.ok);
}

TEST_CASE("resources: the multi-head layer checks its whole footprint first", "[gpu][resources][mha]") {
    Context context(small_budget());
    const std::int64_t E = 64, L = 4096, N = 2;  // 2 MiB of input, 10 MiB of projections and output
    std::vector<float> w(3 * E * E, 0.01f), wo(E * E, 0.01f), x(L * N * E, 0.5f), out(x.size());
    const MultiHeadAttention layer({.embed_dim = E, .num_heads = 4, .bias = false},
                                   {.in_proj_weight = w, .out_proj_weight = wo});
    CHECK_THROWS_AS(layer.forward(context, {.query = {x.data(), {L, N, E}}}, {out.data()}), ResourceLimit);
    std::vector<float> small_out(static_cast<std::size_t>(8 * N * E));
    layer.forward(context, {.query = {x.data(), {8, N, E}}}, {small_out.data()});
    CHECK(std::isfinite(small_out[0]));
}

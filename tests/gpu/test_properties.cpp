// Property tests: hundreds of random requests — shapes, layouts, dtypes, masks, model features,
// paths and kernel variants drawn together — each against the CPU reference. The run's seed is
// printed; a failure prints its case in full. The default seed is fixed, so that the suite (and
// CI) is reproducible; explore with VKATTN_PROPERTY_SEED=random, replay a run with
//   VKATTN_PROPERTY_SEED=<seed> build/tests/vkattn_gpu_tests "[property]"
// and change the count with VKATTN_PROPERTY_CASES (default 300).
#include "support/catch.hpp"

#include <cstdlib>
#include <random>
#include <string>

#include "support/expect_case.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

unsigned env_or(const char* name, unsigned fallback) {
    const char* v = std::getenv(name);
    if (v && std::string(v) == "random") return std::random_device{}();
    return v && *v ? static_cast<unsigned>(std::stoul(v)) : fallback;
}

// A mask shape broadcastable to [B, Hq, Nq, Nkv]: a random rank, each dimension full or 1.
std::vector<std::int64_t> random_mask_shape(std::mt19937& rng, const Case& c) {
    const std::int64_t full[4] = {c.B, c.Hq, c.Nq, c.Nkv};
    const int rank = std::uniform_int_distribution<int>(0, 4)(rng);
    std::vector<std::int64_t> shape;
    for (int d = 4 - rank; d < 4; ++d) shape.push_back(std::bernoulli_distribution(0.6)(rng) ? full[d] : 1);
    return shape;
}

Case random_case(std::mt19937& rng) {
    auto uniform = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
    auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    Case c;
    c.B = uniform(1, 3);
    c.Hkv = uniform(1, 3);
    c.Hq = c.Hkv * uniform(1, 3);
    c.Nq = chance(0.2) ? 1 : uniform(1, 150);
    c.Nkv = uniform(1, 200);
    c.Dk = chance(0.3) ? 4 * uniform(1, 32) : uniform(1, 130);
    c.Dv = chance(0.5) ? c.Dk : uniform(1, 130);
    // Storage types: q's for all, f32 or f16, or one of five mixes that between them hold every
    // type. Every mix compiles pipelines of its own (about 4 s each on lavapipe, where shaders are
    // compiled at their first dispatch), so the mixes are few and a block-typed V has Dv = 128: one
    // register layout, which on 8-lane subgroups is 4 column slots per lane, the half-block loads
    // (wider subgroups hold fewer slots and read V in smaller parts). The [storage_types] tests take
    // the types one by one, with heads sized to the device's subgroup to reach the half-block loads.
    struct Types {
        DType q, k, v;
    };
    constexpr Types mixes[] = {{DType::f32, DType::q8_0, DType::q4_0}, {DType::bf16, DType::q4_1, DType::q5_0},
                               {DType::f16, DType::q5_1, DType::iq4_nl}, {DType::f32, DType::bf16, DType::f16},
                               {DType::f32, DType::fp8_e4m3, DType::fp8_e5m2}};
    c.dtype = chance(0.5) ? DType::f32 : DType::f16;
    if (chance(0.2)) {
        const Types& m = mixes[uniform(0, 4)];
        c.dtype = m.q;
        c.k_dtype = m.k;
        c.v_dtype = m.v;
        c.kv_scales = is_fp8(m.k) && chance(0.5);  // per-head scales, else none (1)
        if (is_block_type(m.k)) c.Dk = 32 * uniform(1, 4);
        if (is_block_type(m.v)) c.Dv = 128;
    }
    c.layout = chance(0.5) ? Layout::bhnd : Layout::bnhd;
    const int impl = static_cast<int>(uniform(0, 3));
    c.impl = impl == 0 ? Impl::automatic : impl == 1 ? Impl::unfused : impl == 2 ? Impl::fused : Impl::split;
    c.weights = (c.impl == Impl::unfused || c.impl == Impl::automatic) && chance(0.5);
    if ((c.impl == Impl::unfused || c.impl == Impl::automatic) && chance(0.3))
        c.logits = static_cast<LogitsStage>(uniform(0, 2));
    c.lse = chance(0.7);
    c.splits = c.impl == Impl::split ? static_cast<std::uint32_t>(uniform(1, 5)) : 0;
    switch (uniform(0, 3)) {
        case 1: c.causal = Causal::top_left; break;
        case 2: c.causal = Causal::bottom_right; break;
        case 3: c.causal_offset = uniform(-20, 60); break;
        default: break;
    }
    c.kv_lengths = chance(0.3);
    if (chance(0.3)) c.window = {chance(0.7) ? uniform(0, 60) : -1, chance(0.5) ? uniform(0, 60) : -1};
    if (chance(0.3)) c.bool_mask_shape = random_mask_shape(rng, c);
    if (chance(0.3)) c.float_mask_shape = random_mask_shape(rng, c);
    if (chance(0.2)) c.softcap = std::uniform_real_distribution<double>(1.0, 30.0)(rng);
    if (chance(0.2)) {
        if (chance(0.5)) c.alibi_max_bias = std::uniform_real_distribution<double>(1.0, 8.0)(rng);
        else c.alibi_slopes = true;
    }
    c.sinks = chance(0.2);
    if (chance(0.15)) {
        c.dropout = std::uniform_real_distribution<double>(0.05, 0.6)(rng);
        c.dropout_seed = rng();
    }
    if (chance(0.2)) c.scale = std::uniform_real_distribution<double>(-0.5, 2.0)(rng);
    if (chance(0.3)) c.variant.texel_loads = chance(0.5);
    // Shared tiles on every path: the three-stage path's bmm tiles, the fused and split kernels'
    // staged K/V (GPUs stage by default, CPU devices stream), so each device runs both.
    if (chance(0.3)) c.variant.shared_tiles = chance(0.5);
    if (c.impl == Impl::unfused && chance(0.3)) c.variant.subgroup_ops = chance(0.5);
    return c;
}

}  // namespace

TEST_CASE("property: random requests against the CPU reference", "[gpu][property]") {
    const unsigned run_seed = env_or("VKATTN_PROPERTY_SEED", 20261122u);
    const unsigned cases = env_or("VKATTN_PROPERTY_CASES", 300);
    WARN("property run: VKATTN_PROPERTY_SEED=" << run_seed << " VKATTN_PROPERTY_CASES=" << cases);
    Context& ctx = test::gpu_context();
    std::mt19937 rng(run_seed);
    for (unsigned i = 0; i < cases; ++i) {
        const Case c = random_case(rng);
        const unsigned seed = rng();
        INFO("case " << i << " of run seed " << run_seed << ": " << c.describe(seed));
        try {
            const CaseResult r = run_case(ctx, c, seed);
            INFO(r.message);
            CHECK(r.ok);
        } catch (const InvalidArgument& e) {
            // The only refusal a random case may meet: a path this device cannot run.
            INFO(e.what());
            CHECK(e.argument() == "impl");
        }
        CHECK(test::take_validation_messages(ctx).empty());
    }
}

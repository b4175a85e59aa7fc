// The thread-safety contract (docs/RELIABILITY.md): one Context may be shared by any number of
// threads calling vkattn::attention at once, and each thread may as well have its own. Eight threads
// start together on a latch; each runs cases of every path (unfused, fused, split), both dtypes and
// awkward shapes, on fresh random inputs, and every result is checked against the CPU reference.
// Built with -DVKATTN_SANITIZE=thread, ThreadSanitizer checks the same runs for data races.
//
// Catch2's assertions are not thread-safe, so the threads only record outcomes; the checks run on
// the main thread after the join.
#include "support/catch.hpp"

#include <algorithm>
#include <exception>
#include <latch>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/attention_case.hpp"

using namespace vkattn;
using namespace vkattn::testing;

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 3;

// Eight small cases covering the paths, dtypes, layouts, GQA, masks and features; thread t runs
// case (t + 3·round) mod 8, so at any moment different paths and dtypes are in flight together.
Case mixed_case(int index) {
    Case c;
    switch (index % 8) {
        case 0:  // fused, fp32, GQA, interleaved layout, bottom-right causal with key lengths
            c.B = 2; c.Hq = 4; c.Hkv = 2; c.Nq = 33; c.Nkv = 47; c.Dk = c.Dv = 24;
            c.layout = Layout::bnhd; c.causal = Causal::bottom_right; c.kv_lengths = true;
            c.impl = Impl::fused;
            break;
        case 1:  // unfused with the weights, fp32, MQA, Dk != Dv, a broadcast bool mask
            c.Hq = 3; c.Hkv = 1; c.Nq = 17; c.Nkv = 29; c.Dk = 16; c.Dv = 28;
            c.bool_mask_shape = std::vector<std::int64_t>{17, 29};
            c.impl = Impl::unfused;
            break;
        case 2:  // split-KV decoding, fp16, a float mask broadcast over heads
            c.Hq = c.Hkv = 2; c.Nq = 3; c.Nkv = 200; c.Dk = c.Dv = 64; c.dtype = DType::f16;
            c.float_mask_shape = std::vector<std::int64_t>{1, 1, 3, 200};
            c.impl = Impl::split; c.splits = 4;
            break;
        case 3:  // fused, fp16, GQA 12/2, a sliding window and a softcap
            c.Hq = 12; c.Hkv = 2; c.Nq = 7; c.Nkv = 65; c.Dk = c.Dv = 32; c.dtype = DType::f16;
            c.layout = Layout::bnhd; c.causal = Causal::top_left; c.window = {5, -1}; c.softcap = 30.0;
            c.impl = Impl::fused;
            break;
        case 4:  // unfused with the weights, fp16, an odd head dimension (scalar loads)
            c.Hq = c.Hkv = 2; c.Nq = c.Nkv = 63; c.Dk = c.Dv = 59; c.dtype = DType::f16;
            c.impl = Impl::unfused;
            break;
        case 5:  // the automatic choice with ALiBi, sinks and dropout
            c.B = 2; c.Hq = 4; c.Hkv = 4; c.Nq = 13; c.Nkv = 21; c.Dk = c.Dv = 16;
            c.alibi_max_bias = 8.0; c.sinks = true; c.dropout = 0.1; c.dropout_seed = 99;
            c.weights = false;
            break;
        case 6:  // split-KV, fp32, one query row, key lengths that do not divide the splits
            c.B = 3; c.Hq = c.Hkv = 1; c.Nq = 1; c.Nkv = 513; c.Dk = c.Dv = 80; c.kv_lengths = true;
            c.impl = Impl::split; c.splits = 3;
            break;
        case 7:  // unfused, forced scalar loads through shared tiles and shared-memory reductions
            c.Hq = c.Hkv = 2; c.Nq = 65; c.Nkv = 7; c.Dk = c.Dv = 28;
            c.variant = {.texel_loads = false, .shared_tiles = true, .subgroup_ops = false};
            c.impl = Impl::unfused;
            break;
    }
    if (c.impl == Impl::fused || c.impl == Impl::split) c.weights = false;  // only the three-stage path has them
    return c;
}

struct Outcome {
    bool ok = false;
    std::string message;  // the case with its seed, and what failed
    std::optional<Impl> expected_path, path;
};

Outcome run_recorded(Context& context, const Case& c, unsigned seed) {
    Outcome outcome;
    if (c.impl != Impl::automatic) outcome.expected_path = c.impl;
    try {
        const CaseResult r = run_case(context, c, seed);
        outcome.ok = r.ok;
        outcome.message = r.message;
        outcome.path = r.report.path;
    } catch (const std::exception& e) {
        outcome.message = c.describe(seed) + ": threw " + e.what();
    }
    return outcome;
}

void check_outcomes(const std::vector<Outcome>& outcomes) {
    for (const Outcome& o : outcomes) {
        INFO(o.message);
        CHECK(o.ok);
        if (o.expected_path && o.path) CHECK(*o.path == *o.expected_path);
    }
}

// Distinct seeds per test, thread and round: every thread works on its own fresh inputs.
unsigned seed_of(unsigned test, int thread, int round) {
    return test * 10000u + static_cast<unsigned>(thread * 100 + round);
}

}  // namespace

TEST_CASE("concurrency: 8 threads share one context, every path and dtype at once", "[gpu][concurrency]") {
    Context& context = test::gpu_context();
    test::take_validation_messages(context);
    std::vector<Outcome> outcomes(kThreads * kRounds);
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            start.arrive_and_wait();
            for (int round = 0; round < kRounds; ++round)
                outcomes[static_cast<std::size_t>(t * kRounds + round)] =
                    run_recorded(context, mixed_case(t + 3 * round), seed_of(1, t, round));
        });
    for (auto& thread : threads) thread.join();
    check_outcomes(outcomes);
    CHECK(test::take_validation_messages(context).empty());
}

TEST_CASE("concurrency: 8 threads, each with its own context", "[gpu][concurrency]") {
    std::vector<Outcome> outcomes(kThreads * 2);
    std::vector<std::string> messages(kThreads);
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            start.arrive_and_wait();  // the contexts are created at once, too
            try {
                Context context(test::test_context_options());
                for (int round = 0; round < 2; ++round)
                    outcomes[static_cast<std::size_t>(t * 2 + round)] =
                        run_recorded(context, mixed_case(t + 5 * round), seed_of(2, t, round));
                messages[static_cast<std::size_t>(t)] = test::take_validation_messages(context);
            } catch (const std::exception& e) {
                messages[static_cast<std::size_t>(t)] = std::string("creating the context threw ") + e.what();
            }
        });
    for (auto& thread : threads) thread.join();
    check_outcomes(outcomes);
    for (int t = 0; t < kThreads; ++t) {
        INFO("thread " << t);
        CHECK(messages[static_cast<std::size_t>(t)].empty());
    }
}

TEST_CASE("concurrency: a context lost while other threads wait to submit refuses them cleanly",
          "[gpu][concurrency][lost]") {
    // The third submission reports a timeout (the test hook, so on any device) and marks the context
    // lost while other threads record, submit and wait around it; none may touch the command buffer
    // it still holds. Threads record and submit in parallel, so how many finish before the loss is
    // up to the scheduler: every call either completes correctly or throws DeviceLost, the third
    // submission's caller always throws, and after the loss the context refuses new work.
    ContextOptions options = test::test_context_options();
    options.simulate_timeout_on_submission = 3;
    std::vector<std::string> failures(kThreads);
    std::vector<int> lost(kThreads, 0);
    {
        Context context(options);
        std::latch start(kThreads);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t)
            threads.emplace_back([&, t] {
                Case c;
                c.Hq = c.Hkv = 4;
                c.Nq = c.Nkv = 384;
                c.Dk = c.Dv = 64;
                c.impl = t % 2 ? Impl::fused : Impl::unfused;
                c.weights = false;
                start.arrive_and_wait();
                try {
                    const CaseResult r = run_case(context, c, seed_of(3, t, 0));
                    if (!r.ok) failures[static_cast<std::size_t>(t)] = r.message;
                } catch (const DeviceLost&) {
                    lost[static_cast<std::size_t>(t)] = 1;
                } catch (const std::exception& e) {
                    failures[static_cast<std::size_t>(t)] = c.describe(seed_of(3, t, 0)) + ": threw " + e.what();
                }
            });
        for (auto& thread : threads) thread.join();
        Case after;
        after.Hq = after.Hkv = 2;
        after.Nq = after.Nkv = 64;
        after.Dk = after.Dv = 32;
        CHECK_THROWS_AS(run_case(context, after, seed_of(3, kThreads, 0)), DeviceLost);
        const std::string messages = test::take_validation_messages(context);
        INFO(messages);
        CHECK(messages.empty());
    }  // destroying a lost context waits for the device, then frees what the lost work held
    for (int t = 0; t < kThreads; ++t) {
        INFO("thread " << t << ": " << failures[static_cast<std::size_t>(t)]);
        CHECK(failures[static_cast<std::size_t>(t)].empty());
    }
    CHECK(std::count(lost.begin(), lost.end(), 1) >= 1);
}

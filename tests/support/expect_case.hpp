// Runs one self-check case on the suite's context and checks it: outputs within tolerance of the
// reference, the expected path, no validation message. Seeds are fresh per case; a failure prints
// the case with its seed. Returns the report, whose variant says which kernels ran.
#pragma once

#include <catch2/catch.hpp>

#include <optional>

#include "support/gpu_context.hpp"
#include "vkattn/testing/attention_case.hpp"

namespace vkattn::test {

inline unsigned fresh_seed() {
    static unsigned next = 0x5eed;
    return next++;
}

inline AttentionReport expect_pass(const testing::Case& c, std::optional<Impl> expected_path = std::nullopt) {
    Context& ctx = gpu_context();
    const testing::CaseResult r = testing::run_case(ctx, c, fresh_seed());
    INFO(r.message);
    CHECK(r.ok);
    if (expected_path) CHECK(r.report.path == *expected_path);
    CHECK(take_validation_messages(ctx).empty());
    return r.report;
}

}  // namespace vkattn::test

// Runs one self-check case on the suite's context and checks it: outputs within tolerance of the
// reference, the expected path, no validation message. Seeds are fresh per case; a failure prints
// the case with its seed. Returns the report, whose variant says which kernels ran.
#pragma once

#include "support/catch.hpp"

#include <optional>
#include <string>

#include "support/gpu_context.hpp"
#include "vkattn/errors.hpp"
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

// Runs a case the engine must refuse: InvalidArgument naming `argument` (a case taken fails).
// Returns the refusal's message, for the caller to check the limit it names.
inline std::string expect_refused(const testing::Case& c, const std::string& argument) {
    try {
        testing::run_case(gpu_context(), c, fresh_seed());
        FAIL("taken where " + argument + " should have been refused");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == argument);
        return e.what();
    }
    return {};
}

}  // namespace vkattn::test

// Every test executable's main. The suite expects the tuning functions' own choices (tests derive
// what they expect from them), so a table that `vk-attn tune` left on this machine is ignored
// (VKATTN_TUNING=off) unless the environment says otherwise; the tuner's tests turn it back on.
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"

#include <cstdlib>

#include "support/suite_lifetime.hpp"

int main(int argc, char* argv[]) {
    ::setenv("VKATTN_TUNING", "off", 0);
    const int failed = Catch::Session().run(argc, argv);
    vkattn::test::end_suite_objects();  // the suite's Contexts end before the layers' statics do
    return failed;
}

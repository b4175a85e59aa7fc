// Every test executable's main. The suite expects the tuning functions' own choices (tests derive
// what they expect from them), so a table that `vk-attn tune` left on this machine is ignored
// (VKATTN_TUNING=off) unless the environment says otherwise; the tuner's tests turn it back on.
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"

#include <cstdlib>

int main(int argc, char* argv[]) {
    ::setenv("VKATTN_TUNING", "off", 0);
    return Catch::Session().run(argc, argv);
}

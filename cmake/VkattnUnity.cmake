# Unity builds: CMake compiles each target's sources in batches of 8, one compiler run per batch, so
# the headers every source includes (Catch2's single header for a test file, Vulkan's and the
# standard library's for the engine's) are parsed once per batch rather than once per file. On 2
# cores a clean build took 487 s one file at a time and 279 s in batches (Debian 12, GCC 12); CI
# builds the tree four times (plain, ASan, TSan, the fuzzers).
# The rule it asks of the code: names at namespace scope in a .cpp, anonymous namespaces included,
# are unique across the target's sources (a clash is a compile error, never a silent merge); a
# helper two files need lives in a header. -DVKATTN_UNITY_BUILD=OFF compiles each file alone, which
# is also how to check that every file includes what it uses.
option(VKATTN_UNITY_BUILD "Compile each target's sources in batches (CMake unity builds)" ON)
set(CMAKE_UNITY_BUILD ${VKATTN_UNITY_BUILD})
set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)

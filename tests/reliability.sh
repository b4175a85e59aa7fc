#!/usr/bin/env bash
# The reliability checks of docs/RELIABILITY.md, for CI after the normal suite. Each step has its
# own build directory next to build/, so reruns are incremental:
#   1. build-asan: everything under AddressSanitizer + UndefinedBehaviorSanitizer, the whole ctest
#      suite (lavapipe and the validation layer run inside the instrumented processes);
#   2. build-tsan: the GPU tests under ThreadSanitizer, running the [concurrency] and [lifecycle]
#      tests (the rest of the suite is single-threaded and already covered by step 1);
#   3. build-fuzz: the libFuzzer targets, each run for VKATTN_FUZZ_SECONDS (default 60) seconds.
# It installs nothing. It needs clang with its sanitizer and libFuzzer runtimes (Debian 12:
# apt-get install clang libclang-rt-14-dev) on top of the packages the README lists.
#
#   tests/reliability.sh            VKATTN_JOBS=n (default 2): build and ctest parallelism
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${VKATTN_JOBS:-2}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}

fail() {
    echo "tests/reliability.sh: $*" >&2
    exit 1
}

# clang and its runtimes, checked up front so a missing package is named rather than a link error.
for tool in clang clang++; do
    command -v "$tool" >/dev/null || fail "$tool is not installed; Debian/Ubuntu: apt-get install clang libclang-rt-14-dev"
done
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int main() { return 0; }\n' >"$probe/main.cpp"
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n' \
    >"$probe/fuzz.cpp"
for sanitizers in address,undefined thread; do
    clang++ -fsanitize=$sanitizers "$probe/main.cpp" -o "$probe/a.out" 2>/dev/null ||
        fail "clang++ cannot link -fsanitize=$sanitizers: its runtime is missing; apt-get install libclang-rt-14-dev" \
             "(the libclang-rt package of your clang version)"
done
clang++ -fsanitize=fuzzer "$probe/fuzz.cpp" -o "$probe/a.out" 2>/dev/null ||
    fail "clang++ cannot link -fsanitize=fuzzer: libFuzzer is missing; apt-get install libclang-rt-14-dev"

step() {
    echo
    echo "=== $* ($(date +%T))"
}
start=$SECONDS

step "1/3 AddressSanitizer + UndefinedBehaviorSanitizer: the whole suite"
CC=clang CXX=clang++ cmake -S . -B build-asan -DVKATTN_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure -j"$jobs"

step "2/3 ThreadSanitizer: [concurrency] and [lifecycle]"
CC=clang CXX=clang++ cmake -S . -B build-tsan -DVKATTN_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-tsan -j"$jobs" --target vkattn_gpu_tests
ctest --test-dir build-tsan --output-on-failure -R "concurrency|lifecycle"

step "3/3 libFuzzer: each target for ${VKATTN_FUZZ_SECONDS:-60} s"
VKATTN_JOBS=$jobs VKATTN_FUZZ_BUILD="$root/build-fuzz" fuzz/run.sh "${VKATTN_FUZZ_SECONDS:-60}"

echo
echo "tests/reliability.sh: every check passed in $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"

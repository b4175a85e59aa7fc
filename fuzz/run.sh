#!/usr/bin/env bash
# Builds the libFuzzer targets if needed (clang, -DVKATTN_FUZZ=ON, in build-fuzz/) and runs each for
# SECONDS (default 60) on a copy of its seed corpus in fuzz/corpus/. Exits 1 on any finding, naming
# the input that triggered it and the command that replays it.
#
#   fuzz/run.sh [SECONDS]
#   VKATTN_FUZZ_BUILD=dir   the build directory (default build-fuzz)
#   VKATTN_JOBS=n           parallel build jobs (default 2)
#   VKATTN_FUZZ_TARGETS     the targets to run (default "npy safetensors resolve")
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${VKATTN_FUZZ_BUILD:-$root/build-fuzz}
targets=${VKATTN_FUZZ_TARGETS:-npy safetensors resolve}

if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
    echo "fuzz/run.sh: clang and clang++ are needed (libFuzzer ships with clang);" \
         "Debian/Ubuntu: apt-get install clang libclang-rt-14-dev (or the runtime package of your clang)" >&2
    exit 1
fi

if [[ ! -f $build/CMakeCache.txt ]]; then
    CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DVKATTN_FUZZ=ON -DVKATTN_BUILD_TESTS=OFF \
        -DVKATTN_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build" -j"${VKATTN_JOBS:-2}" --target $(printf 'fuzz_%s ' $targets)

artifacts=$build/fuzz-findings
mkdir -p "$artifacts"
failed=()
for target in $targets; do
    work=$(mktemp -d)
    cp -R "$root/fuzz/corpus/$target/." "$work/"
    echo "== fuzz_$target: ${seconds}s from $(ls "$work" | wc -l) seeds"
    # -timeout: one input running 10 s is a hang; -rss_limit_mb: a finding past 2 GB (libFuzzer's
    # default, stated so it is visible); findings land in $artifacts as crash-*, timeout-*, oom-*.
    if ! "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -artifact_prefix="$artifacts/fuzz_$target-" -print_final_stats=1 "$work" 2>"$work.log"; then
        tail -n 60 "$work.log" >&2
        failed+=("fuzz_$target")
    else
        grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$work.log" || true
    fi
    rm -rf "$work" "$work.log"
done

if ((${#failed[@]})); then
    echo "fuzz/run.sh: findings in ${failed[*]}; inputs in $artifacts, replay one with" \
         "$build/fuzz/<target> <input>" >&2
    exit 1
fi
echo "fuzz/run.sh: no findings in ${seconds}s per target"

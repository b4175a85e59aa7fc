#!/usr/bin/env bash
# A/B of two (or more) builds on a lent GPU, in one time-boxed call: every point runs on each kit in
# turn (interleaved, so that the clocks' drift falls on both alike), after one unrecorded warm-up
# point that ramps the clocks. Each kit is ../shared/tools/gpu-kit's .gpu/kit of one build, packed
# as .gpu/pack/NAME.tar.xz (tar -cf - -C .gpu kit | xz) and carried; from the checkout's root there:
#
#   bash bench/gpu_ab.sh SECONDS POINTS NAME...
#
# POINTS: a file of vk-attn argument lines, each run with --json ('#' comments; "stats: ARGS" also
# prints the compiler's statistics of the kernels ARGS builds; "tests: TAGS" runs the kit's GPU test
# binary on those Catch2 tags with VKATTN_TEST_LAYER=off, so that the [coopmat] cases take the
# matrix units, and records its summary; "tests-layer: TAGS" the same with the layer on, which
# takes the units only with a layer that knows them: bench/build_validation_layer.sh's, carried as
# .gpu/pack/layer.tar.xz; each line records the layer's api version, layer_api): bench points, or
# check runs. With
# one NAME it is a time-boxed run of one build. Results: $OUT (else /tmp/gpu-out)/ab.jsonl, each line
# with "kit"; log.txt (stderr).
set -u
budget=$1; points=$2; shift 2; O=${OUT:-/tmp/gpu-out}; mkdir -p "$O"
for name in "$@"; do
  mkdir -p ".gpu/ab/$name" && tar -xJf ".gpu/pack/$name.tar.xz" -C ".gpu/ab/$name" || exit 1
  # The kit's CTest files and run scripts name its own path; only vk-attn is used here.
done
kit=$(pwd)/.gpu/ab/$1/kit
source bench/gpu_kit_env.sh  # the first kit's loader and layer; left, short
: > "$O/ab.jsonl"
"$kit/build/vk-attn" devices 2>&1 | grep -E '^\*|matrix|reconvergence'
"$kit/build/vk-attn" bench --batch 1 --heads 32 --seq 16384 --dim 128 --dtype f16 --impl fused --fused-kernel tile \
  --repeat 1 --warmup 1 >/dev/null 2>&1   # the clocks ramp from idle
grep -v '^\s*#' "$points" | grep -v '^\s*$' | while read -r line; do
  extra=(); [[ $line == stats:* ]] && { line=${line#stats:}; extra=(--kernel-statistics); }
  for name in "$@"; do
    (( $(left) > 10 )) || break 2
    if [[ $line == tests:* || $line == tests-layer:* ]]; then
      layer=off; [[ $line == tests-layer:* ]] && layer=on
      tags=${line#*:}; tags=${tags# }; log=$O/tests-$name-layer-$layer.log
      # Line-buffered and compact (a line per failure), so that a run the time box cuts keeps its failures.
      VKATTN_TEST_LAYER=$layer timeout "$(( $(left) - 5 ))" stdbuf -oL ".gpu/ab/$name/kit/build/tests/vkattn_gpu_tests" -r compact "$tags" > "$log" 2>&1
      python3 -c "import sys, json; print(json.dumps({'kit': '$name', 'tests': sys.argv[1], 'layer': '$layer', 'layer_api': '${LAYER_API:-}', 'rc': int(sys.argv[2]), 'summary': open(sys.argv[3]).read()[-1500:]}))" \
        "$tags" "$?" "$log" | tee -a "$O/ab.jsonl"
      continue
    fi
    # shellcheck disable=SC2086
    timeout "$(left)" ".gpu/ab/$name/kit/build/vk-attn" $line --json "${extra[@]}" 2>>"$O/log.txt" | grep '^{' |
      python3 -c "import sys, json; [print(json.dumps({'kit': '$name', **json.loads(l)})) for l in sys.stdin]" | tee -a "$O/ab.jsonl" | short
  done
done
echo "[$(( $(date +%s) - T0 ))s] done"

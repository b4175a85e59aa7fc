#!/usr/bin/env bash
# The performance sweep recorded in docs/PERFORMANCE.md: fused vs three-stage over sequence length,
# head dimension, causal and dtype, sliding windows, split-KV decoding and the backward pass; every point validated against the CPU
# reference where that is affordable, and quoted against the GEMM ceiling measured in the same run.
#   bench/sweep.sh [path/to/vk-attn] [output dir]      (or: cmake --build build --target benchmark)
set -euo pipefail
tool=${1:-build/vk-attn}
out=${2:-bench-results}
mkdir -p "$out"
log="$out/points.jsonl"
: >"$log"
# Every call measures the GEMM ceiling first (--gemm, 1024³), so each point's vs_gemm compares
# with a ceiling taken minutes, not an hour, away on this noisy machine. Timestamps cover only GPU
# execution (pipeline compilation happens before), so the big points need no warm-up.
run() { "$tool" bench --json --gemm --gemm-size 1024 "$@" | tee -a "$log"; }

for dtype in f32 f16; do
  for causal in "" --causal; do
    for dim in 64 128; do
      run --impl fused --dtype $dtype $causal --dim $dim --seq 256,1024 --repeat 3 --warmup 1 --validate
      run --impl unfused --dtype $dtype $causal --dim $dim --seq 256,1024 --repeat 3 --warmup 1 --validate
      run --impl fused --dtype $dtype $causal --dim $dim --seq 4096,8192 --repeat 1 --warmup 0
      run --impl unfused --dtype $dtype $causal --dim $dim --seq 4096,8192 --repeat 1 --warmup 0
    done
  done
done
# Sliding windows: the fused path's cost follows the window, not N².
for window in 127 511 2047; do
  run --impl fused --causal --heads 4 --seq 4096 --dim 64 --window=$window,-1 --repeat 3 --warmup 1
done
run --impl fused --causal --heads 4 --seq 4096 --dim 64 --repeat 3 --warmup 1
# Decoding: B = 1, Hq = 32, Hkv = 8, one query, long KV caches.
for impl in split fused; do
  run --impl $impl --heads 32 --kv-heads 8 --seq 1 --kv-seq 4096 --dim 128 --repeat 5 --warmup 1 --validate
  run --impl $impl --heads 32 --kv-heads 8 --seq 1 --kv-seq 32768 --dim 128 --repeat 3 --warmup 1
  run --impl $impl --heads 32 --kv-heads 8 --seq 1 --kv-seq 131072 --dim 128 --repeat 3 --warmup 1
done
# The backward pass (issue #14): B = 1, H = 8, non-causal and causal, against the same run's GEMM.
for causal in "" --causal; do
  run --backward $causal --dim 64,128 --seq 1024 --repeat 3 --warmup 1 --validate
  run --backward $causal --dim 64,128 --seq 2048,4096 --repeat 3 --warmup 1
done
echo "wrote $log" >&2

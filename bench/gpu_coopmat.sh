#!/usr/bin/env bash
# Issue #33's open questions on a lent GPU, in one time-boxed call (docs/PERFORMANCE.md, "NVIDIA H200
# through Vulkan, session 21"). From the checkout's root on the GPU machine, with the kit unpacked
# (../shared/tools/gpu-kit prepare; carried as .gpu/kit, or xz-packed when past 64 MiB):
#
#   bash bench/gpu_coopmat.sh [seconds]     (default 240)
#
#   1. the unsplit causal D = 128 fault on the matrix units: which of GQA, N, D, the tile shape,
#      the mask and a second run (a race would differ) it needs;
#   2. the units' forward against the tile kernel, a long point first so the clocks have ramped,
#      and the GEMM ceiling's new shape;
#   3. decode: the attention alone against the decode loop's step.
# Results: $OUT (else /tmp/gpu-out): vkattn.jsonl (every point), log.txt (stderr).
set -u
kit=$(pwd)/.gpu/kit; O=${OUT:-/tmp/gpu-out}; budget=${1:-240}
source bench/gpu_kit_env.sh
"$B" devices 2>&1 | grep -E '^\*|matrix'

el "1. the fused causal fault at D = 128 (f16, --validate; f16's bar 3e-3)"
V="bench --dtype f16 --validate --repeat 1 --warmup 0 --impl fused --fused-kernel coopmat --seq 1000"
pt 30 $V --heads 4 --kv-heads 2 --dim 128 --causal                 # the failing case
pt 30 $V --heads 4 --kv-heads 2 --dim 128 --causal                 # again: a race would differ
pt 30 $V --heads 4 --kv-heads 4 --dim 128 --causal                 # without GQA
pt 30 bench --dtype f16 --validate --repeat 1 --warmup 0 --impl fused --fused-kernel coopmat --seq 1024 --heads 4 --dim 128 --causal
pt 30 $V --heads 4 --kv-heads 2 --dim 112,144 --causal             # other widths, unsplit
pt 30 $V --heads 4 --kv-heads 2 --dim 128 --window 300,0           # a band without the causal flag
pt 30 $V --heads 4 --kv-heads 2 --dim 128 --causal-offset 50       # the diagonal moved
pt 30 bench --dtype f16 --validate --repeat 1 --warmup 0 --impl fused --fused-kernel coopmat --seq 128 --heads 1 --dim 128 --causal  # the smallest
pt 30 $V --heads 4 --kv-heads 2 --dim 64,96 --causal               # narrower, unsplit
pt 30 $V --heads 4 --kv-heads 2 --dim 128 --alibi-max-bias 8       # the elementwise path without a causal mask
pt 30 bench --dtype f32 --validate --repeat 1 --warmup 0 --impl fused --fused-kernel coopmat --seq 1000 --heads 4 --kv-heads 2 --dim 128 --causal  # f32 storage

el "2. forward, B 1, H 32, f16: a long warm-up point, then coopmat against tile"
pt 60 bench --batch 1 --heads 32 --seq 16384 --dim 128 --dtype f16 --impl fused --fused-kernel coopmat --repeat 3 --warmup 1
for k in coopmat tile; do
  pt 60 bench --batch 1 --heads 32 --seq 4096,16384 --dim 64,128 --dtype f16 --impl fused --fused-kernel $k --repeat 5 --warmup 3
done
pt 40 bench --batch 1 --heads 32 --seq 4096,16384 --dim 128 --dtype f16 --variant coopmat-64x32 --repeat 5 --warmup 3

el "GEMM 8192^3 on the units: 4 x 4 accumulators per subgroup, 32-deep (session 21's 2 x 2, 64-deep: 51.9 TFLOP/s)"
pt 40 bench --batch 1 --heads 1 --seq 16 --dim 64 --dtype f16 --gemm --gemm-size 1000 --gemm-kernel coopmat --validate --repeat 1
pt 40 bench --batch 1 --heads 1 --seq 16 --dim 64 --dtype f16 --gemm --gemm-size 8192 --gemm-kernel coopmat --repeat 3

el "3. decode, Hq 32, Hkv 8, D 128, f16: the attention alone, then the loop's step"
for n in 4096 32768; do
  pt 20 bench --batch 1 --heads 32 --kv-heads 8 --seq 1 --kv-seq $n --dim 128 --dtype f16 --impl split --fused-kernel decode --repeat 5
done
pt 30 decode --batch 1 --heads 32 --kv-heads 8 --dim 128 --prompt 32768 --steps 16 --dtype f16
el done

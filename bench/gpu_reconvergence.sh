#!/usr/bin/env bash
# Session 22's GPU call for issue #33 (docs/PERFORMANCE.md, "NVIDIA H200 through Vulkan, session
# 22"): does maximal reconvergence mend the unsplit causal fault, what does it cost, and what the
# compiler made of each kernel. From the checkout's root on the GPU machine, with the kit unpacked:
#
#   bash bench/gpu_reconvergence.sh [seconds]     (default 300)
#
#   1. the fault's cases (session 22's bisect: D >= 112, rows of one subgroup with different key
#      ranges) with the branch-free softmax alone ($VKATTN_MAXIMAL_RECONVERGENCE=0), then with
#      maximal reconvergence too;
#   2. the compiler's statistics (registers, spills, shared memory) of every kernel a forward,
#      backward, decode and GEMM point builds;
#   3. what maximal reconvergence costs: the forward, decode and tile points with and without it.
# Results: $OUT (else /tmp/gpu-out): vkattn.jsonl (every point), kernels.jsonl, log.txt (stderr).
set -u
kit=$(pwd)/.gpu/kit; O=${OUT:-/tmp/gpu-out}; budget=${1:-300}
source bench/gpu_kit_env.sh
"$B" devices 2>&1 | grep -E '^\*|matrix|reconvergence'

V="bench --dtype f16 --validate --repeat 1 --warmup 0 --impl fused --fused-kernel coopmat --seq 1000 --heads 4 --kv-heads 2"
for mr in 0 1; do
  export VKATTN_MAXIMAL_RECONVERGENCE=$mr
  el "1. the fault's cases, maximal reconvergence $mr (f16's bar 3e-3; before: 6.2e-3, 1.0e-2, 8.4e-3, 1.8e-2, 9.1e-3, 8.1e-4)"
  pt 30 $V --dim 128 --causal
  pt 30 $V --dim 112,144 --causal
  pt 30 $V --dim 128 --window 300,0
  pt 30 $V --dim 128 --causal-offset 50
  pt 30 bench --dtype f16 --validate --repeat 1 --warmup 0 --impl fused --fused-kernel coopmat --seq 1024 --heads 4 --dim 128 --causal
  pt 30 bench --dtype f16 --validate --repeat 1 --warmup 0 --variant coopmat-32x64 --seq 1000 --heads 4 --kv-heads 2 --dim 128 --causal
done
unset VKATTN_MAXIMAL_RECONVERGENCE

el "2. the compiler's statistics per kernel"
ks 60 bench --dtype f16 --repeat 1 --warmup 0 --impl fused --fused-kernel coopmat --seq 1024 --heads 4 --dim 64,128 --causal
ks 60 bench --dtype f16 --repeat 1 --warmup 0 --impl fused --fused-kernel tile --seq 1024 --heads 4 --dim 128
ks 60 bench --dtype f16 --repeat 1 --warmup 0 --backward --fused-kernel coopmat --seq 1024 --heads 4 --dim 128
ks 30 bench --dtype f16 --repeat 1 --warmup 0 --impl split --fused-kernel decode --seq 1 --kv-seq 4096 --heads 32 --kv-heads 8 --dim 128
ks 30 bench --dtype f16 --repeat 1 --warmup 0 --seq 16 --heads 1 --gemm --gemm-size 1024 --gemm-kernel coopmat

el "3. what maximal reconvergence costs (a warm-up point first)"
pt 60 bench --batch 1 --heads 32 --seq 16384 --dim 128 --dtype f16 --impl fused --fused-kernel coopmat --repeat 2 --warmup 1
for mr in 1 0; do
  export VKATTN_MAXIMAL_RECONVERGENCE=$mr; el "maximal reconvergence $mr"
  pt 60 bench --batch 1 --heads 32 --seq 16384 --dim 64,128 --dtype f16 --impl fused --fused-kernel coopmat --repeat 5 --warmup 2
  pt 60 bench --batch 1 --heads 32 --seq 16384 --dim 128 --dtype f16 --impl fused --fused-kernel coopmat --causal --repeat 5 --warmup 2
  pt 30 bench --batch 1 --heads 32 --kv-heads 8 --seq 1 --kv-seq 32768 --dim 128 --dtype f16 --impl split --fused-kernel decode --repeat 20 --warmup 5
  pt 60 bench --batch 1 --heads 32 --seq 4096 --dim 128 --dtype f16 --impl fused --fused-kernel tile --repeat 3 --warmup 1
done
el done

#!/usr/bin/env bash
# Session 23 (issue #33): where the cooperative-matrix kernels' time goes on a lent GPU, by ablation.
# Kit "abl" is a throwaway build whose flash_coopmat.comp and bmm_coopmat.comp read a specialization
# constant (id 30) from $VKATTN_ABLATE (bench/patches/coopmat_ablate.patch, against f9c0f9a):
#   forward: 0 as built, 1 K/V staged without their global loads, 2 no softmax (P = S/1000),
#            3 both, 4 no K/V staging at all (stale tiles, barriers kept);
#   GEMM:    0 as built, 1 slices staged without global loads, 2 products only (operands loaded
#            once), 3 no staging and no barriers (the shared-memory loads and products).
# Kit "base" is the build before; both packed as .gpu/pack/NAME.tar.xz. From the checkout's root:
#   bash bench/gpu_ablate.sh SECONDS
set -u
budget=$1; O=${OUT:-/tmp/gpu-out}; mkdir -p "$O"
for name in abl base; do mkdir -p ".gpu/ab/$name" && tar -xJf ".gpu/pack/$name.tar.xz" -C ".gpu/ab/$name" || exit 1; done
kit=$(pwd)/.gpu/ab/abl/kit
source bench/gpu_kit_env.sh
base=.gpu/ab/base/kit/build/vk-attn
"$B" devices 2>&1 | grep -iE 'matrix|shape|16x|reconv|^\*' | head -20
el "head dim 256 on the units (check's case), base then abl"
for tool in "$base" "$B"; do
  timeout 40 "$tool" check --dtype f16 --variants coopmat 2>&1 | grep -iE 'fail|256|passed' | head -6 | cut -c1-400
done
"$B" bench --batch 1 --heads 32 --seq 16384 --dim 128 --dtype f16 --impl fused --fused-kernel tile --repeat 1 --warmup 1 >/dev/null 2>&1
for round in 1 2; do
  el "round $round"
  for a in 0 1 2 3 4; do
    VKATTN_ABLATE=$a pt 40 bench --batch 1 --heads 32 --seq 4096 --dim 64,128 --dtype f16 --impl fused --fused-kernel coopmat --repeat 5 --warmup 2 | sed "s/^/A$a /"
  done
  for a in 0 1 2 3; do
    VKATTN_ABLATE=$a pt 40 bench --batch 1 --heads 1 --seq 16 --dim 64 --dtype f16 --gemm --gemm-size 8192 --gemm-kernel coopmat --repeat 3 | grep gemm | sed "s/^/A$a /"
  done
  B=$base pt 40 bench --batch 1 --heads 1 --seq 16 --dim 64 --dtype f16 --gemm --gemm-size 8192 --gemm-kernel coopmat --repeat 3 | grep gemm | sed "s/^/base /"
done
for a in 0 1 4; do
  VKATTN_ABLATE=$a pt 40 bench --batch 1 --heads 32 --seq 16384 --dim 128 --dtype f16 --impl fused --fused-kernel coopmat --repeat 3 --warmup 1 | sed "s/^/A$a /"
done
el done

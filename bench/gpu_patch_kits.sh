#!/usr/bin/env bash
# Kits for a GPU A/B against this checkout, from the project root here (not on the GPU machine):
# the checkout's own kit as `base`, then one per argument, packed as .gpu/pack/NAME.tar.xz for
# bench/gpu_ab.sh (carry [".gpu/pack"]):
#   NAME=PATCH   this checkout with PATCH applied (bench/patches/*.patch), built by
#                ../shared/tools/gpu-kit prepare incrementally (1-2 minutes for shaders alone), then
#                reverted
#   NAME=@REV    revision REV, built in a local clone of its own under .gpu/rev/ (a full build, ~6
#                minutes on 2 cores; the matrix units' shaders from this checkout's build/toolchain)
#
#   bash bench/gpu_patch_kits.sh loops=bench/patches/accumulator_loops.patch w=@9d4a185
#
# Stops at the first argument that does not apply or build; the checkout is left as it was.
set -euo pipefail
[[ -f CMakeLists.txt && -d .git ]] || { echo "run from the project root"; exit 1; }
[[ -z $(git status --porcelain --untracked-files=no) ]] || { echo "commit or stash first: the kits must differ by their arguments alone"; exit 1; }
root=$(pwd); kit_tool=$(cd ../shared/tools && pwd)/gpu-kit
mkdir -p .gpu/pack
# An A/B runs vk-attn and the GPU tests (gpu_ab.sh's "tests:"); the kit's other tests (CPU-only, or
# needing the source tree: 65 MB, more than carry's 64 MiB for several kits) stay here.
pack() { tar -cf - -C "$2/.gpu" --exclude='kit/build/tests/install-*' --exclude=kit/build/tests/vkattn_unit_tests \
  --exclude=kit/build/tests/vkattn_instance_churn --exclude=kit/build/tests/vkattn_io_tests --exclude=kit/build/tests/vkattn_cli_tests kit | xz -T"$(nproc)" -6 > "$root/.gpu/pack/$1.tar.xz"; echo "packed $1: $(du -h "$root/.gpu/pack/$1.tar.xz" | cut -f1)"; }
"$kit_tool" prepare >/dev/null && pack base "$root"
for pair in "$@"; do
  name=${pair%%=*}; what=${pair#*=}
  if [[ $what == @* ]]; then
    tree=$root/.gpu/rev/$name
    [[ -d $tree ]] || git clone -q --no-checkout "$root" "$tree"  # a clone, not a worktree: gpu-kit wants .git a directory
    git -C "$tree" checkout -q --detach "${what#@}"
    mkdir -p "$tree/build" && ln -sfn "$root/build/toolchain" "$tree/build/toolchain"
    (cd "$tree" && "$kit_tool" prepare >/dev/null) || { echo "$name: the build failed"; exit 1; }
    pack "$name" "$tree"
  else
    git apply "$what"
    if "$kit_tool" prepare >/dev/null; then pack "$name" "$root"; git apply -R "$what"
    else git apply -R "$what"; echo "$name: the build failed"; exit 1; fi
  fi
done
"$kit_tool" prepare >/dev/null  # .gpu/kit back to the checkout's own

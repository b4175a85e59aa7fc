#!/usr/bin/env bash
# The Khronos validation layer of Vulkan SDK 1.3.283, built from source for the GPU kit (issue #33):
# Debian 12's layer (1.3.239) predates VK_KHR_cooperative_matrix (1.3.255), so with it on the
# engine keeps the matrix units off and the units' kernels were tested only with the layer off.
# This one knows the extension; bench/gpu_kit_env.sh puts it in the kit's place where
# .gpu/pack/layer.tar.xz exists, so that the [coopmat] tests run through the intrinsics with the
# layer on. From the project root, here (not on the GPU machine): 16 minutes on 2 cores.
#
#   bash bench/build_validation_layer.sh        # -> .gpu/pack/layer.tar.xz (carry [".gpu/pack"])
#
# Sources: the tags and commits of the layer's scripts/known_good.json at vulkan-sdk-1.3.283.0,
# from a local mirror where one exists (VKATTN_MIRRORS, default /work/.mirror/OWNER+NAME/repo),
# else cloned from GitHub. C++17 and CMake 3.17: Debian 12's g++ and cmake build them.
set -euo pipefail
[[ -f CMakeLists.txt && -e .git ]] || { echo "run from the project root"; exit 1; }
root=$(pwd); work=$root/.gpu/vvl; mirrors=${VKATTN_MIRRORS:-/work/.mirror}
src=$work/src; bld=$work/build; inst=$work/install; out=$work/layer
mkdir -p "$src" "$bld" "$inst" "$root/.gpu/pack"
jobs=${JOBS:-2}
checkout() {  # NAME COMMIT
  local dir=$src/$1 from=$mirrors/KhronosGroup+$1/repo
  [[ -d $from ]] || from=https://github.com/KhronosGroup/$1.git
  [[ -d $dir/.git ]] || git clone -q --no-checkout "$from" "$dir"
  git -C "$dir" checkout -q --detach "$2"
}
checkout Vulkan-Headers v1.3.283
checkout Vulkan-Utility-Libraries ad7f699a7b2b5deb66eb3de19f24aa33597ed65b
checkout SPIRV-Headers 4f7b471f1a66b6d06462cd4ba57628cc0cd087d7
checkout SPIRV-Tools dd4b663e13c07fea4fbb3f70c1c91c86731099f7
checkout Vulkan-ValidationLayers vulkan-sdk-1.3.283.0
# A mirror may hold a repository without its largest files. The layer needs one of them: its table
# of the specification's sentence per VUID (generated from Vulkan-Headers' validusage.json, which
# such a mirror lacks too). Where it is missing it is written with no sentences: messages then name
# their VUID alone, which is all a test needs (any message fails it).
spec_text=$src/Vulkan-ValidationLayers/layers/vulkan/generated/vk_validation_error_messages.h
[[ -s $spec_text ]] || cat > "$spec_text" <<'EOF_HEADER'
// Written by bench/build_validation_layer.sh: the spec-text table generated from Vulkan-Headers'
// validusage.json, absent from the mirror it was built from. Messages name their VUID without the
// specification's sentence.
#pragma once
typedef struct _vuid_spec_text_pair {
    const char * vuid;
    const char * spec_text;
    const char * url_id;
} vuid_spec_text_pair;
static const vuid_spec_text_pair vuid_spec_text[] = {
    {"VUID-unavailable", "(spec text not built in)", "default"},
};
EOF_HEADER

common=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$inst" -DCMAKE_PREFIX_PATH="$inst"
        -DCMAKE_POSITION_INDEPENDENT_CODE=ON -Wno-dev)
step() {  # NAME [CMAKE ARGS...]: configure, build and install one project (a stamp skips it next
  # time: delete .gpu/vvl to rebuild at other commits)
  local name=$1 log=$bld/$1.log; shift
  [[ -f $bld/$name.done ]] && return 0
  echo "[$(date +%T)] $name"
  { cmake -S "$src/$name" -B "$bld/$name" "${common[@]}" "$@" && cmake --build "$bld/$name" -j"$jobs" &&
    cmake --install "$bld/$name"; } > "$log" 2>&1 || { echo "$name failed: see $log"; tail -20 "$log"; exit 1; }
  touch "$bld/$name.done"
}
step Vulkan-Headers
step SPIRV-Headers
step SPIRV-Tools -DSPIRV-Headers_SOURCE_DIR="$src/SPIRV-Headers" -DSPIRV_SKIP_TESTS=ON -DSPIRV_SKIP_EXECUTABLES=ON \
  -DSPIRV_WERROR=OFF -DSPIRV_TOOLS_BUILD_STATIC=ON
step Vulkan-Utility-Libraries -DVULKAN_HEADERS_INSTALL_DIR="$inst" -DUPDATE_DEPS=OFF -DBUILD_TESTS=OFF
step Vulkan-ValidationLayers -DVULKAN_HEADERS_INSTALL_DIR="$inst" -DUPDATE_DEPS=OFF -DBUILD_TESTS=OFF -DBUILD_WERROR=OFF \
  -DUSE_ROBIN_HOOD_HASHING=OFF -DBUILD_WSI_XCB_SUPPORT=OFF -DBUILD_WSI_XLIB_SUPPORT=OFF -DBUILD_WSI_WAYLAND_SUPPORT=OFF \
  -DSPIRV_HEADERS_INSTALL_DIR="$inst"

# The layer and its manifest side by side, the manifest naming the library by a relative path (the
# loader resolves it from the manifest's directory), packed for the kit.
rm -rf "$out" && mkdir -p "$out"
lib=$(find "$inst" -name libVkLayer_khronos_validation.so | head -1)
manifest=$(find "$inst" -name VkLayer_khronos_validation.json | head -1)
cp "$lib" "$out/" && strip --strip-unneeded "$out/libVkLayer_khronos_validation.so"
python3 - "$manifest" "$out/VkLayer_khronos_validation.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["layer"]["library_path"] = "./libVkLayer_khronos_validation.so"
json.dump(m, open(sys.argv[2], "w"), indent=4)
EOF
tar -cf - -C "$work" layer | xz -T"$jobs" -6 > "$root/.gpu/pack/layer.tar.xz"
echo "packed layer: $(du -h "$root/.gpu/pack/layer.tar.xz" | cut -f1) ($(jq -r .layer.api_version "$out/VkLayer_khronos_validation.json" 2>/dev/null || echo 1.3.283))"

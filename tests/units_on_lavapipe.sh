#!/usr/bin/env bash
# The matrix units' kernels on a CPU (docs/LAVAPIPE.md, "The matrix units on a CPU"): the
# cooperative-matrix kernels built with CM_KHR, the SPIR-V a GPU runs, not their portable
# implementation. Mesa's lavapipe offers VK_KHR_cooperative_matrix from 26.1 (8 × 8 × 8 shapes,
# and VK_NV_cooperative_matrix2's flexible dimensions, which take the kernels' 16 × 16 × 16); Debian
# 12 has Mesa 22.3. So this makes a Debian 13 root with trixie-backports' Mesa (debootstrap, kept
# between runs), builds the working tree there, confirms the kernels run on the units, and runs
# `vk-attn check` on every cooperative-matrix variant and the [coopmat] tests with the validation
# layer on.
#
#   sudo tests/units_on_lavapipe.sh [TEST-SPEC]   (TEST-SPEC: the Catch tests to run, default "[coopmat]")
#
# Root (debootstrap, chroot). VKATTN_UNITS_ROOT: where the root lives (default
# ~/.cache/vkattn-units-root, about 1.5 GiB); VKATTN_JOBS: build parallelism (default 2);
# VKATTN_UNITS_VARIANTS: the variants `vk-attn check` forces (default coopmat,split-coopmat: the
# other layouts compile for minutes each on lavapipe; the [coopmat] tests force them at their shapes);
# VKATTN_UNITS_TEST_ARGS: more arguments for the test program (`-d yes` prints each case's time as it
# ends, the only sign of progress in a run of 45 minutes); VKATTN_MATRIX_TILE=8x8 (8x16, 16x8): the
# kernels' parts build, each 16 × 16 matrix in tiles of that size, as on Intel's Arc (8 × 8 × 16),
# through lavapipe's flexible dimensions.
# The first run takes about 25 minutes on 2 cores (the root, then the build); later ones rebuild
# what changed. Not in CI: the root alone would take a tenth of its time.
set -euo pipefail
project=$(cd "$(dirname "$0")/.." && pwd)
root=${VKATTN_UNITS_ROOT:-$HOME/.cache/vkattn-units-root}
jobs=${VKATTN_JOBS:-2}
spec=${1:-[coopmat]}
variants=${VKATTN_UNITS_VARIANTS:-coopmat,split-coopmat}
test_args=${VKATTN_UNITS_TEST_ARGS:-}
fail() {
    echo "tests/units_on_lavapipe.sh: $*" >&2
    exit 1
}
[[ $(id -u) == 0 ]] || fail "run as root (debootstrap and chroot)"
command -v debootstrap >/dev/null || fail "debootstrap is not installed; apt-get install debootstrap"
step() { echo "=== $* ($(date +%T))"; }

# Inside the root: Debian 13 with trixie-backports, whose Mesa (26.1 or newer) is the first with the
# units; its glslang (15) and spirv-val compile and check the units' shaders, and its validation
# layer knows both extensions. Catch2 3 there; the suite takes 2 or 3 (tests/support/catch.hpp).
packages="cmake make g++ libvulkan-dev glslc glslang-tools spirv-tools vulkan-validationlayers catch2 libcli11-dev
          nlohmann-json3-dev python3 ca-certificates"
if [[ ! -f $root/.vkattn-ready ]]; then
    step "a Debian 13 root in $root"
    mirror=$(grep -rhE '^\s*(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
             grep -oE 'https?://[^ ]+/debian/?$' | head -n 1 || true)  # a missing sources file is no error
    mirror=${mirror:-http://deb.debian.org/debian}
    rm -rf "$root"
    mkdir -p "$(dirname "$root")"
    debootstrap --variant=minbase --include=ca-certificates trixie "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
        fail "debootstrap failed: $(tail -n 1 "$root.debootstrap.log")"
    rm -f "$root/etc/apt/sources.list"
    printf 'Types: deb\nURIs: %s\nSuites: trixie trixie-updates trixie-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$mirror" >"$root/etc/apt/sources.list.d/debian.sources"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -c \
        "apt-get update -qq && apt-get install -y -qq --no-install-recommends $(echo $packages) >/dev/null &&
         apt-get install -y -qq --no-install-recommends -t trixie-backports mesa-vulkan-drivers >/dev/null" ||
        fail "installing the packages in $root failed"
    touch "$root/.vkattn-ready"
fi

mounted=()
cleanup() {
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for dir in proc dev; do
    if ! mountpoint -q "$root/$dir"; then
        if [[ $dir == proc ]]; then mount -t proc proc "$root/proc"; else mount --bind /dev "$root/dev"; fi
        mounted+=("$root/$dir")
    fi
done
# An hour's fence wait for the tests: lavapipe compiles a kernel at its first dispatch, inside the
# wait, and through the units a D 256 kernel of two row tiles met the engine's 10 minutes.
run() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 XDG_RUNTIME_DIR=/tmp \
            VKATTN_TEST_FENCE_TIMEOUT=3600 VKATTN_MATRIX_TILE="${VKATTN_MATRIX_TILE:-}" bash -c "$1"; }

mesa=$(run "dpkg-query -W -f '\${Version}' mesa-vulkan-drivers")
[[ $(printf '%s\n26.1\n' "$mesa" | sort -V | head -n 1) == 26.1 ]] || fail "Mesa $mesa in $root; the units need 26.1 or newer"

step "the working tree into $root/src"
mkdir -p "$root/src"
(cd "$project" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -C "$root/src" -xf -
step "build (Mesa $mesa)"
run "cd /src && cmake -S . -B build-units -DCMAKE_BUILD_TYPE=Release -DVKATTN_COOPMAT_UNITS=ON -DVKATTN_SHADER_TOOLCHAIN=/usr >/dev/null &&
     cmake --build build-units -j$jobs --target vk-attn vkattn_gpu_tests >/dev/null"

step "the device"
devices=$(run "cd /src && build-units/vk-attn devices")
echo "$devices" | grep -E "cooperative"
echo "$devices" | grep -q "kernels: on the matrix units" || fail "the cooperative-matrix kernels do not run on lavapipe's units"
if [[ -n ${VKATTN_MATRIX_TILE:-} ]]; then
    echo "$devices" | grep -q "matrix units (${VKATTN_MATRIX_TILE}x16: each 16x16 matrix in parts" ||
        fail "the units do not run the parts build at ${VKATTN_MATRIX_TILE}"
fi

step "vk-attn check --variants $variants through the units"
run "cd /src && build-units/vk-attn check --variants $variants --dtype f16,f32" | grep -E "FAIL|passed|failed"

step "the tests $spec, validation layer on"
run "cd /src && build-units/tests/vkattn_gpu_tests '$spec' $test_args"
echo "tests/units_on_lavapipe.sh: every check passed on the units of lavapipe (Mesa $mesa)"

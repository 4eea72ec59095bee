#!/usr/bin/env bash
# Mesa 26 lavapipe: the CPU Vulkan driver that implements VK_KHR_cooperative_matrix (subgroup scope,
# 8x8x8; emulated, so correct but slow), on which the cooperative-matrix kernels are proven without a
# GPU. The system's Mesa 22.3 stays installed and the default.
#   scripts/mesa26.sh install     downloads Debian sid's mesa-vulkan-drivers, its Vulkan loader and
#                                 validation layer, and everything they depend on down to glibc, and
#                                 unpacks them into the cache folder below; idempotent (a complete
#                                 unpacked copy is kept; `install --refresh` takes sid's newest)
#   scripts/mesa26.sh env         prints the environment that selects it, as shell assignments
#   scripts/mesa26.sh run PROG..  runs the program PROG (an ELF executable, not a script) on it
#   scripts/mesa26.sh version     prints the unpacked Mesa version
#   scripts/mesa26.sh unpack DIR PKG...  unpacks other sid packages with everything they depend on
#                                 into DIR (the device bundle's llama.cpp: scripts/device_bundle.sh)
#   scripts/mesa26.sh versions PKG...    prints each package's sid version (what unpack takes)
#
# Why binaries and a private glibc. The archive this machine reaches serves sid's binary packages
# but not the source of mesa 26 (its pool answers 404 for mesa_26.*.orig.tar.xz), so lavapipe is not
# built here. Sid's lavapipe needs glibc 2.43 and Debian 12 has 2.36, so `run` starts PROG through
# sid's own dynamic loader with sid's libraries first on its search path: PROG (built on Debian 12,
# which newer glibc runs) then loads sid's libvulkan, lavapipe, LLVM 22 and validation layer, and
# takes from the system only what sid's set lacks (libfmt, say). A program started by PROG would
# fall back to the system loader, which is why PROG must be the test executable itself, not ctest.
#
# Integrity: apt checks every package against the sha256 in sid's signed index (InRelease, checked
# with Debian's archive keyring); only the index's expiry date is not checked, because the mirror
# here may serve a sid index older than its Valid-Until. Nothing is installed into the system: apt
# runs on a private configuration and state inside the cache folder.
#
# Cache folder: outside the checkout, so that CI's clean clones reuse it:
#   ${VKLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vkllm}/mesa26
# A cold install downloads about 80 MB and unpacks about 400 MB (seconds on this machine).
set -euo pipefail

MESA26_MIN_VERSION=26.0
# The driver, the loader and layer that know Vulkan 1.4 and cooperative matrices; glslang-tools and
# spirv-tools are not needed to run.
MESA26_PACKAGES=(mesa-vulkan-drivers libvulkan1 vulkan-validationlayers)
MESA26_DIR="${VKLLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vkllm}/mesa26"
MESA26_MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
MESA26_LIB="$MESA26_DIR/root/usr/lib/$MESA26_MULTIARCH"
MESA26_ICD="$MESA26_DIR/lvp_icd.json"
MESA26_LAYERS="$MESA26_DIR/layers"
MESA26_APT="$MESA26_DIR/apt"

loader() {
    local l
    for l in "$MESA26_LIB"/ld-linux*.so.*; do
        [ -e "$l" ] && { echo "$l"; return; }
    done
    echo "mesa26: no dynamic loader in $MESA26_LIB" >&2
    return 1
}

check_installed() {
    if [ ! -f "$MESA26_DIR/complete" ]; then
        echo "mesa26: Mesa 26 lavapipe is not unpacked in $MESA26_DIR: run scripts/mesa26.sh install" >&2
        exit 1
    fi
}

apt_private() {
    APT_CONFIG="$MESA26_APT/apt.conf" "$@"
}

setup_apt() {
    mkdir -p "$MESA26_APT"/etc/sources.list.d "$MESA26_APT"/etc/preferences.d "$MESA26_APT"/etc/apt.conf.d \
        "$MESA26_APT"/state/lists/partial "$MESA26_APT"/cache/archives/partial
    : >"$MESA26_APT/status"
    printf '%s\n' "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main" \
        >"$MESA26_APT/etc/sources.list"
    local arch
    arch=$(dpkg --print-architecture)
    cat >"$MESA26_APT/apt.conf" <<EOF
Dir::Etc "$MESA26_APT/etc";
Dir::State "$MESA26_APT/state";
Dir::State::status "$MESA26_APT/status";
Dir::Cache "$MESA26_APT/cache";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
Acquire::Check-Valid-Until "false";
EOF
    if [ "$(id -u)" = 0 ]; then echo 'APT::Sandbox::User "root";' >>"$MESA26_APT/apt.conf"; fi
    apt_private apt-get update -qq ||
        { echo "mesa26: cannot read sid's package index (apt-get update with $MESA26_APT/apt.conf failed)" >&2; exit 1; }
}

install() {
    if [ -f "$MESA26_DIR/complete" ] && [ "${1:-}" != --refresh ]; then
        echo "mesa26: Mesa $(cat "$MESA26_DIR/version") lavapipe already unpacked in $MESA26_DIR"
        return
    fi
    command -v apt-get >/dev/null || { echo "mesa26: needs apt-get (Debian)" >&2; exit 1; }
    rm -rf "$MESA26_DIR"
    mkdir -p "$MESA26_DIR/root"
    setup_apt
    local version
    version=$(apt_private apt-cache policy mesa-vulkan-drivers | awk '/Candidate:/ {print $2}')
    if [ -z "$version" ] || [ "$version" = "(none)" ] ||
        ! dpkg --compare-versions "$version" ge "$MESA26_MIN_VERSION"; then
        echo "mesa26: sid offers mesa-vulkan-drivers '${version:-none}', need >= $MESA26_MIN_VERSION" >&2
        exit 1
    fi
    echo "mesa26: downloading mesa-vulkan-drivers $version and what it needs from sid"
    unpack_closure "$MESA26_DIR/root" "${MESA26_PACKAGES[@]}"
    [ -f "$MESA26_LIB/libvulkan_lvp.so" ] || { echo "mesa26: no libvulkan_lvp.so in the unpacked packages" >&2; exit 1; }
    loader >/dev/null
    # The packages' JSON files name their libraries without a path, which would find the system's.
    local api
    api=$(sed -n 's/.*"api_version": *"\([0-9.]*\)".*/\1/p' "$MESA26_DIR"/root/usr/share/vulkan/icd.d/lvp_icd*.json | head -1)
    printf '{\n    "file_format_version": "1.0.1",\n    "ICD": {\n        "library_path": "%s",\n        "api_version": "%s"\n    }\n}\n' \
        "$MESA26_LIB/libvulkan_lvp.so" "$api" >"$MESA26_ICD"
    mkdir -p "$MESA26_LAYERS"
    sed "s#\"library_path\": *\"[^\"]*\"#\"library_path\": \"$MESA26_LIB/libVkLayer_khronos_validation.so\"#" \
        "$MESA26_DIR/root/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json" \
        >"$MESA26_LAYERS/VkLayer_khronos_validation.json"
    echo "$version" >"$MESA26_DIR/version"
    touch "$MESA26_DIR/complete"
    # The proof that it runs: lavapipe loads under sid's loader and reports cooperative matrices.
    local probe
    probe=$(run_prog /bin/true 2>&1) || { echo "mesa26: sid's loader cannot run a program: $probe" >&2; exit 1; }
    echo "mesa26: Mesa $version lavapipe (Vulkan $api) unpacked in $MESA26_DIR"
}

# Downloads the packages and their whole dependency closure (glibc included: every library they
# were linked against) from sid, and unpacks them into $1.
unpack_closure() {
    local dest=$1 debs closure
    shift
    closure=$(apt_private apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances "$@" | grep -v '^ ' | grep -v '^<' | sort -u)
    [ -n "$closure" ] || { echo "mesa26: sid has none of: $*" >&2; exit 1; }
    debs=$(mktemp -d "${TMPDIR:-/tmp}/mesa26-debs.XXXXXX")
    # shellcheck disable=SC2086
    (cd "$debs" && apt_private apt-get download -qq $closure) || { rm -rf "$debs"; echo "mesa26: download failed" >&2; exit 1; }
    mkdir -p "$dest"
    for deb in "$debs"/*.deb; do dpkg -x "$deb" "$dest"; done
    rm -rf "$debs" "$MESA26_APT/cache/archives"/*.deb
}

env_lines() {
    echo "VK_ICD_FILENAMES=$MESA26_ICD"
    echo "VK_LAYER_PATH=$MESA26_LAYERS"
}

run_prog() {
    local prog="$1" name="$1"
    shift
    [ -f "$prog" ] && [ -x "$prog" ] || prog=$(command -v "$name") || { echo "mesa26: no program '$name'" >&2; exit 1; }
    if [ "$(head -c 4 "$prog" | od -An -c | tr -d ' ')" != '177ELF' ]; then
        echo "mesa26: $prog is not an ELF executable (a script's children would run on the system's glibc, without Mesa 26): run the test executable itself" >&2
        exit 1
    fi
    # VK_DRIVER_FILES set by the caller would win over VK_ICD_FILENAMES; VK_ADD_LAYER_PATH could put
    # the system's older validation layer beside sid's.
    env -u VK_DRIVER_FILES -u VK_ADD_LAYER_PATH -u LD_LIBRARY_PATH $(env_lines) \
        "$(loader)" --library-path "$MESA26_LIB" "$prog" "$@"
}

case "${1:-}" in
    install) shift; install "$@" ;;
    env) check_installed; env_lines ;;
    run) shift; check_installed; [ $# -gt 0 ] || { echo "usage: scripts/mesa26.sh run PROG [ARGS...]" >&2; exit 2; }; run_prog "$@" ;;
    version) check_installed; cat "$MESA26_DIR/version" ;;
    versions)
        shift
        check_installed
        for p in "$@"; do echo "$p $(apt_private apt-cache policy "$p" | awk '/Candidate:/ {print $2}')"; done
        ;;
    unpack)
        shift
        [ $# -ge 2 ] || { echo "usage: scripts/mesa26.sh unpack DIR PKG..." >&2; exit 2; }
        check_installed
        dest=$1
        shift
        apt_private apt-get update -qq || { echo "mesa26: cannot read sid's package index" >&2; exit 1; }
        unpack_closure "$dest" "$@"
        ;;
    *) echo "usage: scripts/mesa26.sh install [--refresh] | env | run PROG [ARGS...] | version | unpack DIR PKG... | versions PKG..." >&2; exit 2 ;;
esac

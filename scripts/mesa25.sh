#!/usr/bin/env bash
# Mesa 25 lavapipe (Vulkan 1.4) from bookworm-backports, unpacked beside the system's Mesa 22.3
# (Vulkan 1.3), which stays installed and the default. CI runs the suite on both (scripts/test.sh).
#   scripts/mesa25.sh install     adds bookworm-backports as an apt source (its own sources file),
#                                 downloads the packages and unpacks them into .cache/mesa25/;
#                                 idempotent: an unpacked copy of the wanted version is kept
#   scripts/mesa25.sh env         prints the environment that selects it, as shell assignments
#   scripts/mesa25.sh run CMD...  runs CMD on Mesa 25 lavapipe (install first)
#   source scripts/mesa25.sh      exports that environment into the calling shell (install first)
# Nothing is installed into the system (only the apt source is added): lavapipe's ICD JSON, which
# names the unpacked driver by absolute path, chooses it (VK_ICD_FILENAMES replaces the loader's
# driver search, so the system lavapipe is not listed beside it; a VK_DRIVER_FILES set by the caller
# would win over it, so `run` and the sourced form unset it). The system's Vulkan loader and
# validation layer (1.3.239) serve both Mesa versions.

# Extra libraries: libvulkan_lvp.so of 25.0 resolves every symbol against bookworm's own libraries
# (libLLVM-15, libstdc++, libz, libzstd, libexpat, xcb: `ldd -r` finds nothing undefined), but the
# package declares libdrm2 >= 2.4.121 and bookworm has 2.4.114, so the backports libdrm2 is unpacked
# too and put first on LD_LIBRARY_PATH, alone in its folder (the other unpacked libraries, e.g. Mesa's
# device-select layer, must not shadow the system's). `install` checks with ldd that lavapipe gets it.
MESA25_PACKAGES=(mesa-vulkan-drivers libdrm2)
MESA25_SUITE=bookworm-backports
MESA25_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/mesa25"
MESA25_MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
MESA25_LVP="$MESA25_DIR/root/usr/lib/$MESA25_MULTIARCH/libvulkan_lvp.so"
MESA25_LIB="$MESA25_DIR/lib"  # what LD_LIBRARY_PATH adds: only libdrm
MESA25_ICD="$MESA25_DIR/lvp_icd.json"

mesa25_env() {
    echo "VK_ICD_FILENAMES=$MESA25_ICD"
    echo "LD_LIBRARY_PATH=$MESA25_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

mesa25_check_installed() {
    if [ ! -f "$MESA25_ICD" ]; then
        echo "mesa25: Mesa 25 lavapipe is not unpacked in $MESA25_DIR: run scripts/mesa25.sh install (scripts/install_deps.sh does)" >&2
        return 1
    fi
}

# The backports version of mesa-vulkan-drivers apt knows of (empty if none).
mesa25_candidate() {
    apt-cache madison mesa-vulkan-drivers | awk -v s="$MESA25_SUITE/main" 'index($0, s) && !v {v = $3} END {print v}'
}

mesa25_install() {
    local sudo="" apt_opts=() sources=/etc/apt/sources.list.d/vkllm-bookworm-backports.sources
    if [ "$(id -u)" != 0 ]; then sudo=sudo; else apt_opts=(-o APT::Sandbox::User=root); fi
    # Backports are pinned below the release (priority 100), so adding the source changes no
    # installed package: only `apt-get download` below takes anything from it.
    # Asked of apt, not grepped from its source files: a commented-out line or a file apt ignores
    # (say *.disabled) would otherwise count as a source.
    if [ -z "$(mesa25_candidate)" ] && [ ! -f "$sources" ]; then
        printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: $MESA25_SUITE" \
            "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" |
            $sudo tee "$sources" >/dev/null
        $sudo apt-get update -qq
    fi
    local version
    version=$(mesa25_candidate)
    if [ -z "$version" ]; then  # the source was there, its package list not yet
        $sudo apt-get update -qq
        version=$(mesa25_candidate)
    fi
    [ -n "$version" ] || { echo "mesa25: no mesa-vulkan-drivers in $MESA25_SUITE" >&2; return 1; }
    if [ -f "$MESA25_ICD" ] && [ "$(cat "$MESA25_DIR/version" 2>/dev/null)" = "$version" ]; then
        echo "mesa25: mesa-vulkan-drivers $version already unpacked in $MESA25_DIR"
    else
        rm -rf "$MESA25_DIR"
        mkdir -p "$MESA25_DIR/debs"
        local pkgs=()
        for p in "${MESA25_PACKAGES[@]}"; do pkgs+=("$p/$MESA25_SUITE"); done
        (cd "$MESA25_DIR/debs" && apt-get "${apt_opts[@]}" download -qq "${pkgs[@]}")
        for deb in "$MESA25_DIR"/debs/*.deb; do dpkg -x "$deb" "$MESA25_DIR/root"; done
        mkdir -p "$MESA25_LIB"
        cp -a "$MESA25_DIR/root/usr/lib/$MESA25_MULTIARCH"/libdrm.so.2* "$MESA25_LIB/"
        # The package's own JSON names the library without a path, which would find the system's.
        printf '{\n    "file_format_version": "1.0.0",\n    "ICD": {\n        "library_path": "%s",\n        "api_version": "%s"\n    }\n}\n' \
            "$MESA25_LVP" \
            "$(sed -n 's/.*"api_version": *"\([0-9.]*\)".*/\1/p' "$MESA25_DIR/root/usr/share/vulkan/icd.d/lvp_icd.json")" \
            >"$MESA25_ICD"
        echo "$version" >"$MESA25_DIR/version"
        echo "mesa25: unpacked mesa-vulkan-drivers $version into $MESA25_DIR"
    fi
    # Every library lavapipe needs must resolve, every symbol too, and libdrm from here.
    local ldd_out
    ldd_out=$(env LD_LIBRARY_PATH="$MESA25_LIB" ldd -r "$MESA25_LVP" 2>&1)
    if grep -q "not found\|undefined symbol" <<<"$ldd_out"; then
        echo "mesa25: libvulkan_lvp.so cannot be loaded on this system:" >&2
        grep "not found\|undefined symbol" <<<"$ldd_out" >&2
        return 1
    fi
    grep -q "libdrm.so.2 => $MESA25_LIB/" <<<"$ldd_out" || { echo "mesa25: libdrm.so.2 is not the unpacked one" >&2; return 1; }
    echo "mesa25: ready; run a command on it with: scripts/mesa25.sh run CMD, or with this environment:"
    mesa25_env
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: export the environment into the caller's shell.
    # A failed check returns 1, so `source scripts/mesa25.sh || exit` never goes on with Mesa 22.3.
    mesa25_check_installed || return 1
    unset VK_DRIVER_FILES
    while IFS= read -r kv; do export "${kv?}"; done < <(mesa25_env)
    return 0
fi

set -euo pipefail
case "${1:-}" in
install) mesa25_install ;;
env) mesa25_check_installed && mesa25_env ;;
run)
    shift
    [ $# -gt 0 ] || { echo "usage: scripts/mesa25.sh run CMD [ARGS...]" >&2; exit 2; }
    mesa25_check_installed || exit 1
    mapfile -t vars < <(mesa25_env)
    exec env -u VK_DRIVER_FILES "${vars[@]}" "$@"
    ;;
*)
    echo "usage: scripts/mesa25.sh install | env | run CMD [ARGS...]; or: source scripts/mesa25.sh" >&2
    exit 2
    ;;
esac

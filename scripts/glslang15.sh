#!/usr/bin/env bash
# glslang 15.1 (Debian 13's source package), built here into .cache/glslang15/: the shader compiler a
# cooperative-matrix (tensor core) kernel needs. Debian 12's glslang 12 does not know
# GL_KHR_cooperative_matrix, and Debian 12's spirv-val does not know the capability either, so such a
# module can only be checked by the driver and the validation layer of a GPU that has it.
#   scripts/glslang15.sh install   downloads the upstream tarball of trixie's glslang_15.1.0+1.4.309.0
#                                  from the Debian archive (sha256 pinned as trixie's Sources lists it),
#                                  builds glslangValidator without its optimizer (no SPIRV-Tools: about
#                                  a minute on 2 cores), and checks it: tests/toolchain/coopmat_smoke.comp
#                                  must compile; idempotent
#   scripts/glslang15.sh path      prints the compiler's path (install first)
#   scripts/glslang15.sh check     compiles every vkllm shader with it (a build folder configured with
#                                  -DGLSLANG_VALIDATOR=<path>, target vkllm_shaders; Debian 12's
#                                  spirv-val still validates each) and the smoke shader: a stage of
#                                  scripts/test.sh, so the step stays ready for the GPU session that
#                                  lands the first cooperative-matrix kernel
# docs/gpu.md says how that session uses it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=15.1.0+1.4.309.0
TARBALL=glslang_$VERSION.orig.tar.gz
URL=http://deb.debian.org/debian/pool/main/g/glslang/$TARBALL
SHA256=180f17ea51e6b71bf57b9e0fea78ba3ecd76e3ec8e4c91f0771b922eb22bf4b2
DIR="$ROOT/.cache/glslang15"
BIN="$DIR/prefix/bin/glslangValidator"
SMOKE="$ROOT/tests/toolchain/coopmat_smoke.comp"

smoke() {
  # vulkan1.1 is what vkllm's shaders target (shaders/shaders.cmake); the capability needs no newer SPIR-V.
  "$BIN" --quiet -V --target-env vulkan1.1 -o "$DIR/coopmat_smoke.spv" "$SMOKE" ||
    { echo "glslang15.sh: $BIN does not compile $SMOKE" >&2; exit 1; }
  # OpCooperativeMatrixMulAddKHR is opcode 4459: the module must hold the multiply itself.
  od -An -tx4 -v "$DIR/coopmat_smoke.spv" | tr -s ' ' '\n' | grep -q '0006116b' ||
    { echo "glslang15.sh: the smoke shader's module has no OpCooperativeMatrixMulAddKHR" >&2; exit 1; }
}

install() {
  if [ -x "$BIN" ] && [ "$(cat "$DIR/version" 2>/dev/null)" = "$VERSION" ]; then smoke; return; fi
  command -v curl >/dev/null || { echo "glslang15.sh: curl is missing (scripts/install_deps.sh installs it)" >&2; exit 1; }
  rm -rf "$DIR" && mkdir -p "$DIR"
  echo "glslang15.sh: downloading $URL"
  curl -fsS --retry 3 -m 300 -o "$DIR/$TARBALL" "$URL" ||
    { echo "glslang15.sh: cannot download $URL (has trixie moved to a newer glslang? update VERSION and SHA256 from its Sources index)" >&2; exit 1; }
  echo "$SHA256  $DIR/$TARBALL" | sha256sum -c --quiet - ||
    { echo "glslang15.sh: $TARBALL does not match the pinned sha256" >&2; exit 1; }
  tar -xzf "$DIR/$TARBALL" -C "$DIR"
  local src="$DIR/glslang-$VERSION"
  # No optimizer (ENABLE_OPT=OFF): it would need SPIRV-Tools built from source too, and vkllm's
  # shaders are compiled without -Os either way. HLSL and glslang's own tests are not needed.
  cmake -S "$src" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENABLE_OPT=OFF -DENABLE_HLSL=OFF \
    -DGLSLANG_TESTS=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_INSTALL_PREFIX="$DIR/prefix" >"$DIR/configure.log" 2>&1 ||
    { echo "glslang15.sh: configure failed, see $DIR/configure.log" >&2; exit 1; }
  cmake --build "$DIR/build" --target install -j"$(nproc)" >"$DIR/build.log" 2>&1 ||
    { echo "glslang15.sh: build failed, see $DIR/build.log" >&2; exit 1; }
  rm -rf "$DIR/build" "$src" "$DIR/$TARBALL"
  echo "$VERSION" >"$DIR/version"
  smoke
  echo "glslang15.sh: $("$BIN" --version | head -1) at $BIN"
}

check() {
  install
  local build="${VKLLM_GLSLANG15_BUILD:-$ROOT/build-glslang15}"
  cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGLSLANG_VALIDATOR="$BIN" >/dev/null
  cmake --build "$build" --target vkllm_shaders -j"$(nproc)" >"$build/glslang15-shaders.log" 2>&1 ||
    { tail -40 "$build/glslang15-shaders.log" >&2; echo "glslang15.sh: a shader fails with glslang 15 (above)" >&2; exit 1; }
  echo "glslang15.sh: $(ls "$build/shaders/spv/"*.spv | wc -l) shaders compiled by $("$BIN" --version | head -1 | sed 's/^Glslang Version: //') and validated"
}

case "${1:-}" in
  install) install ;;
  path) [ -x "$BIN" ] || { echo "glslang15.sh: not installed (scripts/glslang15.sh install)" >&2; exit 1; }; echo "$BIN" ;;
  check) check ;;
  *) echo "usage: scripts/glslang15.sh install|path|check" >&2; exit 2 ;;
esac

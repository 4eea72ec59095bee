#!/usr/bin/env bash
# Builds build-device/: everything the GPU check needs on an x86-64 Linux machine that has a
# Vulkan driver but none of vkllm's Debian libraries and no network (the device tool's machines).
#   scripts/device_bundle.sh            then, there:   OUT=DIR build-device/device_check.sh
# Contents (the device tool takes 64 MiB for the whole uploaded tree, checkout included, about 7 MiB
# of it: the script fails above 48 MiB). payload.tar.xz (xz: 117 MiB of executables and libraries in about 20;
# device_check.sh unpacks it into a temporary folder) holds
#   bin/      vkllm, the test executables and capi_smoke, stripped, RUNPATH $ORIGIN/../lib
#   lib/      their shared libraries that are not glibc or libstdc++ (fmt, pcre2, libedit, ...),
#             libvkllm.so, and Debian 12's Vulkan loader (libvulkan.so.1, from libvulkan1)
#   layers/   the Khronos validation layer and its manifest
#   peer/     llama.cpp b4748's llama-bench with its libraries (../shared/peer/b4748), the speed peer
# and beside it
#   llama-sid.tar.xz  llama.cpp at its best: Debian sid's llama-bench, whose Vulkan shaders sid's glslc
#             (shaderc 2026) compiled with both cooperative-matrix extensions, with its ggml backends
#             and sid's libraries down to glibc (it needs glibc 2.43), started through sid's dynamic
#             loader as scripts/mesa26.sh starts programs, and sid's validation layer, which knows
#             VK_KHR_cooperative_matrix: the check runs the cooperative-matrix tests on that runtime
#             (xz: about 107 MiB in 21)
#   gl/       Debian 12's glvnd packages (.deb), which NVIDIA's driver needs where the image lacks them
#   models/   stories260K with its published greedy text, the small shared test models, Llama 3's
#             vocabulary (gzipped) for the constrained-decode model
#   tests.txt, tests-quick.txt  "executable source-stem" per test file, device_check.sh,
#             check_summary.py, bench_schema.json (the constrained-decode step's schema)
# Builds in build/ (the README's quick start) unless VKLLM_BUNDLE_BUILD names another, Release either way.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${VKLLM_BUNDLE_BUILD:-build}
DEST=build-device
SHARED=$ROOT/../shared
command -v patchelf >/dev/null || { echo "device_bundle.sh: patchelf is missing (scripts/install_deps.sh installs it)" >&2; exit 1; }

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
test_exes=(test_runtime test_model test_serving)
cmake --build "$BUILD" -j"$(nproc)" --target vkllm capi_smoke vkllm_shared "${test_exes[@]}"

rm -rf "$DEST"
STAGE=$DEST/payload
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/peer" "$STAGE/layers" "$DEST/models"

# Libraries every x86-64 Linux has (glibc, the C++ runtime of a newer or equal GCC); all others go in lib/.
system_lib() {
  case "$1" in
    linux-vdso.so.*|ld-linux-x86-64.so.*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libstdc++.so.*|libgcc_s.so.*) return 0 ;;
  esac
  return 1
}
copy_deps() {  # binary
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
    system_lib "$soname" && continue
    [ -e "$STAGE/lib/$soname" ] && continue
    cp -L "$path" "$STAGE/lib/$soname"
    strip --strip-unneeded "$STAGE/lib/$soname"
    patchelf --set-rpath '$ORIGIN' "$STAGE/lib/$soname"
  done
}
cp "$BUILD/vkllm" "$BUILD/tests/capi_smoke" "$STAGE/bin/"
for exe in "${test_exes[@]}"; do cp "$BUILD/tests/$exe" "$STAGE/bin/"; done
for f in "$STAGE"/bin/*; do
  copy_deps "$f"
  strip --strip-unneeded "$f"
  patchelf --set-rpath '$ORIGIN/../lib' "$f"
done
# The loader is opened with dlopen (volk), so ldd does not list it.
loader=$(ldconfig -p | awk '$1 == "libvulkan.so.1" && $0 ~ /x86-64/ {print $NF}' | head -1 || true)
cp -L "${loader:-/usr/lib/x86_64-linux-gnu/libvulkan.so.1}" "$STAGE/lib/libvulkan.so.1"

# glvnd, which NVIDIA's driver links against, for images without it (device_check.sh unpacks
# these only where the system lacks libGLdispatch).
mkdir -p "$DEST/gl"
(cd "$DEST/gl" && apt-get download -qq libglvnd0 libglx0 libgl1 libegl1 libopengl0 libgles2 >/dev/null) ||
  echo "device_bundle: warning: glvnd packages not downloaded (no network?): a GPU image without libGLdispatch will not load NVIDIA's driver" >&2

# The validation layer, manifest pointing at the library beside it.
layer_so=/usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so
layer_json=/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json
cp "$layer_so" "$STAGE/layers/"
sed 's|"library_path": *"[^"]*"|"library_path": "./libVkLayer_khronos_validation.so"|' "$layer_json" >"$STAGE/layers/VkLayer_khronos_validation.json"

# The speed peer (its RUNPATH is $ORIGIN already; it needs libvulkan.so.1 from lib/ at run time).
if [ -d "$SHARED/peer/b4748" ]; then
  cp "$SHARED/peer/b4748/"* "$STAGE/peer/"
  chmod -R u+w "$STAGE/peer"
else
  echo "device_bundle: warning: $SHARED/peer/b4748 not found: the check will run without llama-bench" >&2
fi
XZ_OPT=-T0 tar -cJf "$DEST/payload.tar.xz" -C "$STAGE" .
rm -rf "$STAGE"

# llama.cpp with its matrix cores (Debian 12's glslc, which built b4748's shaders, knows neither
# cooperative-matrix extension): sid's packages, the executable, every library it and its Vulkan and
# CPU backends resolve under sid's loader, and the loader itself.
llama_sid() {
  local root sid stage lib f
  root=$(mktemp -d "${TMPDIR:-/tmp}/llama-sid.XXXXXX")
  scripts/mesa26.sh install >/dev/null &&
    scripts/mesa26.sh unpack "$root" llama.cpp-tools libggml0-backend-vulkan vulkan-validationlayers || return 1
  sid=$root/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
  stage=$DEST/llama-sid
  mkdir -p "$stage/lib" "$stage/backends" "$stage/layers"
  cp "$root/usr/bin/llama-bench" "$stage/"
  # sid's validation layer knows VK_KHR_cooperative_matrix (Debian 12's does not): the check runs
  # the cooperative-matrix tests on sid's runtime with it.
  cp "$sid/libVkLayer_khronos_validation.so" "$stage/layers/"
  sed 's|"library_path": *"[^"]*"|"library_path": "./libVkLayer_khronos_validation.so"|' \
    "$root/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json" >"$stage/layers/VkLayer_khronos_validation.json"
  # ggml's CPU backend in the variants of the CPUs GPU machines have, and the generic one.
  cp "$sid/ggml/backends0/libggml-vulkan.so" "$stage/backends/"
  for f in x64 haswell skylakex icelake sapphirerapids zen4; do cp "$sid/ggml/backends0/libggml-cpu-$f.so" "$stage/backends/"; done
  for f in "$stage/llama-bench" "$stage"/backends/*.so "$stage"/layers/*.so; do
    "$sid/ld-linux-x86-64.so.2" --library-path "$sid:$sid/llama" --list "$f" |
      awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do cp -nL "$lib" "$stage/lib/"; done
  done
  cp -L "$sid/ld-linux-x86-64.so.2" "$stage/lib/"
  scripts/mesa26.sh versions llama.cpp-tools libggml0-backend-vulkan >"$stage/VERSION"
  XZ_OPT=-T0 tar -cJf "$DEST/llama-sid.tar.xz" -C "$stage" .
  rm -rf "$stage" "$root"
}
llama_sid || echo "device_bundle: warning: Debian sid's llama.cpp not bundled: the check will compare with b4748 only" >&2

# The vocabularies (ggml-vocab-*.gguf, 24 MiB) stay behind: the tokenizer tests, CPU-only, skip
# their cases without them; but bge's (0.6 MiB), from which the embedding tests write their models.
for f in stories260K.gguf stories260K.greedy200.txt llama-2-tiny-random.gguf tokenizer.model ggml-vocab-bert-bge.gguf; do
  cp "$SHARED/models/$f" "$DEST/models/"
done
# Llama 3's 128k-token vocabulary (2 MiB compressed), for the constrained-decode model.
gzip -c "$SHARED/models/ggml-vocab-llama-bpe.gguf" >"$DEST/models/ggml-vocab-llama-bpe.gguf.gz"

: >"$DEST/tests.txt"
for exe in "${test_exes[@]}"; do
  layer=${exe#test_}
  for src in $(find tests/"$layer" -name '*.cpp' | sort); do
    # test_json_schema's oracles are Debian packages (json-schema-test-suite, python3-jsonschema)
    # that a GPU machine lacks, and it uses no device; nor do the answer and chat-template tests,
    # whose templates (../shared/templates) stay behind.
    [ "$(basename "$src" .cpp)" = test_json_schema ] && continue
    case "$src" in tests/serving/answer/*|tests/serving/chat_template/*) continue ;; esac
    echo "$exe $(basename "$src" .cpp)" >>"$DEST/tests.txt"
  done
done
printf '%s\n' "test_runtime test_devices" "test_runtime test_vec_add" "test_runtime test_rms_norm" >"$DEST/tests-quick.txt"
cp scripts/device_check.sh scripts/check_summary.py scripts/bench_schema.json "$DEST/"
cp tests/fixtures/perplexity/stories.txt "$DEST/blend_text.txt"  # bench-blend's documents (step 3f)

bytes=$(du -sb "$DEST" | cut -f1)
echo "device_bundle: $DEST is $((bytes / 1048576)) MiB"
if [ "$bytes" -gt $((48 * 1048576)) ]; then
  echo "device_bundle: over 48 MiB: the device tool takes 64 MiB with the checkout" >&2
  exit 1
fi

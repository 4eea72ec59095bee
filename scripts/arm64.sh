#!/usr/bin/env bash
# vkllm on 64-bit ARM, proven on an x86-64 Debian 12 host under user-mode emulation (qemu):
#   1. installs Debian's cross toolchain, qemu-user-static and the arm64 (multiarch) libraries,
#      among them Mesa's arm64 lavapipe and the Khronos validation layer for the emulated runs
#   2. cross-builds build-arm64/ with cmake/toolchain-aarch64.cmake, warnings as errors
#   3. runs the ctest labels runtime and capi, of the kernels (runtime.ops) the basic cases, under qemu-aarch64-static
#      on arm64 lavapipe (its natural 128-bit vectors: subgroup size 4), validation layer on as in
#      every test
#   4. runs `vkllm run` on stories260K and compares it byte for byte with the published greedy story
# and prints the time of the build, the tests and the golden run. Idempotent; CI calls it on a fresh
# machine after scripts/install_deps.sh (scripts/test.sh has it as a stage). VKLLM_ARM64_BUILD
# overrides the build folder, VKLLM_JOBS the build parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${VKLLM_ARM64_BUILD:-build-arm64}
JOBS=${VKLLM_JOBS:-$(nproc)}
MODELS=../shared/models
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
# Other builds on the machine may hold the dpkg lock for a while: wait rather than fail.
APT=(apt-get -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends)
for f in stories260K.gguf stories260K.greedy200.txt; do  # before minutes of building, not after
  if [ ! -f "$MODELS/$f" ]; then echo "arm64.sh: $MODELS/$f not found" >&2; exit 1; fi
done

# --- 1. packages ----------------------------------------------------------------------------------
# Mesa's arm64 package puts its ICD manifests (lvp_icd.aarch64.json, ...) into
# /usr/share/vulkan/icd.d, where the host's x86-64 loader finds them too and prints an error for
# each on every run of every Vulkan program. dpkg leaves them out; the emulated loader is pointed
# at a private manifest instead (below).
EXCLUDE=/etc/dpkg/dpkg.cfg.d/vkllm-arm64-icd
if [ ! -f "$EXCLUDE" ]; then
  printf '%s\n' "# vkllm scripts/arm64.sh: arm64 Vulkan drivers stay invisible to the host's loader" \
    'path-exclude=/usr/share/vulkan/icd.d/*.aarch64.json' | $SUDO tee "$EXCLUDE" >/dev/null
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then $SUDO dpkg --add-architecture arm64; fi
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
PKGS=(
  # host: the build tools, the shader compiler and validator, the arch-independent headers
  cmake ninja-build pkg-config glslang-tools spirv-tools libcli11-dev nlohmann-json3-dev doctest-dev
  libvulkan-volk-dev           # volk.c and volk.h, compiled into the runtime for each architecture
  crossbuild-essential-arm64   # aarch64-linux-gnu-gcc/g++ and the cross libc
  qemu-user-static             # qemu-aarch64-static runs shader_embed, the tests and vkllm
  # target: what CMakeLists.txt finds and links (libvulkan-dev:arm64 for find_package(Vulkan); it
  # brings libvulkan1:arm64, the loader volk opens at run time), then what the emulated runs load
  libvulkan-dev:arm64 libfmt-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libedit-dev:arm64 libcpp-httplib-dev:arm64
  libstb-dev:arm64 libwebp-dev:arm64 zlib1g-dev:arm64  # image decoding (model/image)
  libjpeg62-turbo-dev:arm64      # the image tests' independent JPEG encoder
  mesa-vulkan-drivers:arm64      # lavapipe for arm64 (its LLVM JIT emits aarch64 code)
  vulkan-validationlayers:arm64  # same version as the amd64 one: they share the layer manifest
)
$SUDO "${APT[@]}" install "${PKGS[@]}" >/dev/null
# Installed before the exclusion above existed: unpacking the package again drops the manifests.
if compgen -G '/usr/share/vulkan/icd.d/*aarch64*' >/dev/null; then
  $SUDO "${APT[@]}" install --reinstall mesa-vulkan-drivers:arm64 >/dev/null
fi
if compgen -G '/usr/share/vulkan/icd.d/*aarch64*' >/dev/null; then
  echo "arm64.sh: aarch64 ICD manifests left in /usr/share/vulkan/icd.d" >&2
  exit 1
fi

# --- 2. cross-build --------------------------------------------------------------------------------
LABELS='runtime|capi'
t0=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja --toolchain cmake/toolchain-aarch64.cmake -DVKLLM_WERROR=ON \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
# Only what runs below: vkllm, the executables of the selected tests, the shared library that
# capi.symbols reads, and the JNI library (nothing here runs it: building it for aarch64 is the
# check that the Android binding compiles for arm64-v8a). The model, serving and app suites
# would add minutes of cross-compiling that nothing here runs.
commands=$(ctest --test-dir "$BUILD" -N -V -L "$LABELS" | sed -n 's/^.*Test command: //p')
if [ -z "$commands" ]; then echo "arm64.sh: no tests labelled $LABELS in $BUILD" >&2; exit 1; fi
targets=(vkllm vkllm_shared)
# Not `grep -q`: under pipefail its early exit can fail cmake with SIGPIPE and skip the target.
if cmake --build "$BUILD" --target help | grep '^vkllm_jni:' >/dev/null; then
  targets+=(vkllm_jni)
else
  echo "arm64.sh: no vkllm_jni target (no JDK found by the cross configure): the JNI library is not built"
fi
while read -r exe _; do
  case "$exe" in
    *qemu-aarch64-static) ;;
    */check_symbols.sh) continue ;;
    *) echo "arm64.sh: no build target known for the test command $exe" >&2; exit 1 ;;
  esac
done <<<"$commands"
while read -r _ exe _; do
  targets+=("$(basename "${exe//\"/}")")
done < <(grep '^[^ ]*qemu-aarch64-static ' <<<"$commands")
mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"
t_build=$(( $(date +%s) - t0 ))
for lib in "$BUILD/embed/libvkllm.so" "$BUILD/embed/jni/libvkllm_jni.so"; do
  [ -f "$lib" ] || continue
  machine=$(readelf -h "$lib" | sed -n 's/^ *Machine: *//p')
  echo "$lib: $machine"
  if [ "$machine" != AArch64 ]; then echo "arm64.sh: $lib is not an AArch64 library" >&2; exit 1; fi
done
# Absolute: the variables below must not depend on the directory a test runs in, and BUILD may be
# absolute already (scripts/test.sh passes VKLLM_TEST_BUILD through).
BUILD_ABS=$(cd "$BUILD" && pwd)
# The emulated Vulkan loader sees only arm64 lavapipe (the host's manifests name x86-64 libraries).
mkdir -p "$BUILD/vulkan"
cat >"$BUILD/vulkan/lvp_icd.aarch64.json" <<'EOF'
{
    "ICD": {
        "api_version": "1.1.230",
        "library_path": "/usr/lib/aarch64-linux-gnu/libvulkan_lvp.so"
    },
    "file_format_version": "1.0.0"
}
EOF
export VK_DRIVER_FILES=$BUILD_ABS/vulkan/lvp_icd.aarch64.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES
# Compiling shaders is most of the emulated time (LLVM itself runs under qemu). Mesa's shader cache
# keeps the compiled ones in the build folder: a second run on the same machine is much faster, and
# the timings printed at the end of a first run are those of a fresh CI machine.
export MESA_SHADER_CACHE_DIR=$BUILD_ABS/mesa_shader_cache

# --- 3. emulated tests -----------------------------------------------------------------------------
# Under qemu lavapipe is 50-300x slower than on the host (LLVM compiling each pipeline runs
# emulated, then the SIMD code it emits): the labels run with the selection for slow drivers.
# shellcheck source=scripts/slow_driver_tests.sh
source scripts/slow_driver_tests.sh
# Of the kernel suites, the basic cases only (doctest patterns; `?` stands for a comma in a name):
# every kernel at tiny and odd shapes over every weight and KV type, attention's head-dimension
# sweeps, the K/V store, the expert router and the integer-dot matvec. What the kernels' other
# cases vary (batch sizes, fused inputs, bias epilogues, windows, GQA ratios, plan choices) is host
# logic and kernel paths that stages 1-4 run on x86-64 at subgroup sizes 4, 8 and 16 on both Mesa
# versions; this stage proves the arm64 build and arm64 lavapipe's code for each kernel, and the C
# API tests and the golden story below run whole forward passes here.
arm64_kernel_cases=(
  '*tiny*' 'attention decode: head_dim 4..256*' 'attention prefill: head_dim 4..256*'
  'attention_store: stories260K*' 'moe_route: experts and weights*' 'topk: random logits*'
  'matvec dot: every integer-dot type? one vector*'
)
# Of the C API's cases, those that run many model files or formats for host logic only (the tool-call
# formats and chat parsers, a decoder embedding model's pooling, pictures beside a second thread),
# which stages 1-4 run on x86-64: cold, they took 1,190 of the 1,560 s its cases spent under qemu
# (2026-12-07). The story, sessions, cancellation, grammar, one tool-call case and one picture case
# still run here.
arm64_excluded_cases=(
  'capi: forced calls in the formats*' 'capi: a decoder embedding model*'
  'capi: vkllm_chat_json reads*' 'capi: vkllm_chat_json splits*'
  'capi: vkllm_generate continues a conversation with pictures*' 'capi: a picture encoded on one thread*'
)
VKLLM_TEST_CASE_EXCLUDE="$VKLLM_TEST_CASE_EXCLUDE,$(IFS=,; echo "${arm64_excluded_cases[*]}")"
t0=$(date +%s)
echo "=== arm64: kernel (basic cases), runtime and C API tests under qemu-aarch64-static ==="
qemu-aarch64-static "$BUILD/vkllm" devices | grep -E '^device|subgroup size|fp16'
VKLLM_TEST_CASE_INCLUDE=$(IFS=,; echo "${arm64_kernel_cases[*]}") \
  ctest --test-dir "$BUILD" -L 'runtime\.ops' --output-on-failure -j"$JOBS"
ctest --test-dir "$BUILD" -L 'runtime|capi' -LE 'runtime\.ops' --output-on-failure -j"$JOBS"
t_tests=$(( $(date +%s) - t0 ))

# --- 4. golden story ---------------------------------------------------------------------------------
t0=$(date +%s)
echo "=== arm64: stories260K greedy story ==="
qemu-aarch64-static "$BUILD/vkllm" run -m "$MODELS/stories260K.gguf" -p "" -n 200 --temp 0 --no-pipeline-cache \
  >"$BUILD/golden.txt"
if ! cmp "$BUILD/golden.txt" "$MODELS/stories260K.greedy200.txt"; then
  echo "arm64.sh: the aarch64 build's greedy story differs from $MODELS/stories260K.greedy200.txt" >&2
  exit 1
fi
t_golden=$(( $(date +%s) - t0 ))

echo "arm64.sh: build $t_build s, tests $t_tests s, golden $t_golden s"

#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this after installing dependencies).
#   0. scripts/format.sh --check: the product's C++ is formatted as .clang-format says (clang-format 14)
#   1. release build with warnings as errors; the whole suite (end-to-end tests of the vkllm binary
#      and of `vkllm serve` included) on the system's lavapipe, Mesa 22.3 (Vulkan 1.3), every test
#      with the Khronos validation layer on
#   1b. scripts/device_bundle.sh packs that build for a GPU machine and build-device/device_check.sh
#      --quick runs (a few tests and the stories260K bench pair on lavapipe): the GPU check's dry run
#   1c. scripts/glslang15.sh check: glslang 15 (Debian 13's, built from source into .cache/) compiles a
#      cooperative-matrix smoke shader and every vkllm shader (validated by spirv-val): the toolchain a
#      tensor-core kernel needs, kept ready
#   1d. the cooperative-matrix (tensor core) kernel and model tests on Mesa 26 lavapipe, which
#      implements VK_KHR_cooperative_matrix (8x8x8, emulated), from Debian sid's packages
#      (scripts/mesa26.sh install: scripts/install_deps.sh runs it), with VKLLM_TEST_REQUIRE_COOPMAT=1
#      so that a device without it fails rather than skips them
#   2. the runtime and kernel tests again at lavapipe subgroup sizes 4 and 16 (default 8), with
#      the selection of scripts/slow_driver_tests.sh (no real-size sweeps); at size 4 on the real
#      device and the GPU-tuned variant (both use subgroup arithmetic), at 16 on the real device
#   3. every test again, same build, on Mesa 25 lavapipe (Vulkan 1.4) from bookworm-backports,
#      unpacked beside the system's by scripts/mesa25.sh install (scripts/install_deps.sh runs it),
#      without the real-size cases and weakened device variants (scripts/slow_driver_tests.sh)
#   4. every test again built with ASan + UBSan (gcc, -Og: a third of -O2's build time), on every
#      device variant, without the slow-driver list of cases: leaks, memory errors and UB fail it
#   5. the libFuzzer targets (clang-14), VKLLM_FUZZ_SECONDS each (default 60): scripts/fuzz.sh
#   6. aarch64: cross-build, then the kernels' basic cases, the runtime and C API tests and the
#      golden story under qemu-user on arm64 lavapipe: scripts/arm64.sh (it installs the cross
#      toolchain and arm64 packages)
# Set VKLLM_TEST_BUILD to reuse a build directory (stages 4, 5 and 6 use it with -asan / -fuzz / -arm64).
set -euo pipefail
cd "$(dirname "$0")/.."
# Stage 1 runs every case: a selection sourced into the caller's shell must not leak into it.
unset VKLLM_TEST_CASE_EXCLUDE VKLLM_TEST_DEVICE_VARIANTS
BUILD=${VKLLM_TEST_BUILD:-build-test}
JOBS=$(nproc)
start=$(date +%s)
# Stages 1d and 3 need the unpacked Mesa 26 and 25; say so now rather than after the first stages.
scripts/mesa25.sh env >/dev/null
scripts/mesa26.sh env >/dev/null

# Style is a tool's job: the product's C++ as .clang-format says (seconds; fails before the build).
echo "=== clang-format ==="
scripts/format.sh --check

cmake -S . -B "$BUILD" -G Ninja -DVKLLM_WERROR=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$JOBS"

echo "=== test suite (lavapipe default subgroup size) ==="
ctest --test-dir "$BUILD" --output-on-failure -j2

stage=$(date +%s)
echo "=== device bundle, and the GPU check's dry run on lavapipe ==="
# The same build packed as scripts/device_bundle.sh packs it for a GPU machine, then its check with
# --quick: proves the bundle and device_check.sh work before a GPU is lent.
VKLLM_BUNDLE_BUILD="$BUILD" scripts/device_bundle.sh
OUT="$BUILD/device-check" build-device/device_check.sh --quick >/dev/null
echo "device check dry run: $(head -3 "$BUILD/device-check/summary.txt" | tail -1), $(( $(date +%s) - stage )) s"

stage=$(date +%s)
echo "=== glslang 15: the cooperative-matrix toolchain ==="
VKLLM_GLSLANG15_BUILD="$BUILD-glslang15" scripts/glslang15.sh check
echo "glslang 15 stage: $(( $(date +%s) - stage )) s"

stage=$(date +%s)
echo "=== cooperative-matrix kernels on Mesa 26 lavapipe ==="
# The test executables themselves, not ctest: scripts/mesa26.sh starts them on sid's glibc.
(export VKLLM_TEST_REQUIRE_COOPMAT=1 &&
  scripts/mesa26.sh run "$BUILD/tests/test_runtime" -tc='*coopmat*,kernel table*,attention prefill on the matrix*' &&
  scripts/mesa26.sh run "$BUILD/tests/test_model" -tc='*coopmat*')
echo "Mesa 26 stage ($(scripts/mesa26.sh version)): $(( $(date +%s) - stage )) s"

stage=$(date +%s)
# Compiling every pipeline again at each width is what these stages cost (16-lane code compiles
# slowest): the real-size sweeps, which add no subgroup-size case, stay in stage 1.
for width in 128 512; do
  variants=subgroup
  if [ "$width" = 512 ]; then variants=real; fi
  echo "=== kernel tests at LP_NATIVE_VECTOR_WIDTH=$width, device variants: $variants ==="
  (source scripts/slow_driver_tests.sh && export VKLLM_TEST_DEVICE_VARIANTS=$variants &&
    LP_NATIVE_VECTOR_WIDTH=$width ctest --test-dir "$BUILD" -L runtime --output-on-failure -j2)
done
echo "subgroup size stages: $(( $(date +%s) - stage )) s"

stage=$(date +%s)
echo "=== suite on Mesa 25 lavapipe (the selection for slow drivers) ==="
# Mesa 25.0 as bookworm-backports builds it (on LLVM 15) compiles our kernels 10-30x slower than
# Mesa 22.3 (LLVM's coroutine splitting, llvm::coro::buildCoroutineFrame): on a fresh machine the
# whole suite took 80 minutes. Every test runs, without the cases scripts/slow_driver_tests.sh
# lists (real-size sweeps and the two weakened device variants, which stage 1 runs).
(source scripts/slow_driver_tests.sh && scripts/mesa25.sh run ctest --test-dir "$BUILD" --output-on-failure -j2)
echo "Mesa 25 stage: $(( $(date +%s) - stage )) s"

stage=$(date +%s)
echo "=== sanitizers: every test under AddressSanitizer + UndefinedBehaviorSanitizer ==="
# -Og -g1 (assertions on): line numbers in every report at a third of RelWithDebInfo's build time.
# Every device variant (their host paths differ: tile and kernel choice, caps overrides; stage 1
# left their pipelines in the cache), without the slow-driver list of real-size sweeps, which
# would mostly add lavapipe time.
cmake -S . -B "$BUILD-asan" -G Ninja -DVKLLM_WERROR=ON -DVKLLM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1" -DCMAKE_C_FLAGS_DEBUG="-Og -g1" >/dev/null
cmake --build "$BUILD-asan" -j"$JOBS"
(source scripts/slow_driver_tests.sh && export VKLLM_TEST_DEVICE_VARIANTS=all &&
  ctest --test-dir "$BUILD-asan" --output-on-failure -j2)
echo "sanitizer stage: $(( $(date +%s) - stage )) s"

stage=$(date +%s)
fuzz_seconds=${VKLLM_FUZZ_SECONDS:-60}
echo "=== fuzzing: GGUF reader, tokenizer, chat templates, grammars and images, $fuzz_seconds s each ==="
VKLLM_FUZZ_BUILD="$BUILD-fuzz" VKLLM_JOBS="$JOBS" scripts/fuzz.sh "$fuzz_seconds"
echo "fuzz stage: $(( $(date +%s) - stage )) s"

stage=$(date +%s)
echo "=== arm64: cross-build, tests and golden story under qemu-aarch64-static ==="
VKLLM_ARM64_BUILD="$BUILD-arm64" VKLLM_JOBS="$JOBS" scripts/arm64.sh
echo "arm64 stage: $(( $(date +%s) - stage )) s"

echo "test.sh: all stages passed in $(( $(date +%s) - start )) s"

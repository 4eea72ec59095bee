#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this after installing dependencies).
#   1. release build with warnings as errors; every test with the Khronos validation layer on
#   2. the kernel tests again at lavapipe subgroup sizes 4 and 16 (default 8)
#   3. end-to-end checks of the vkllm binary (golden story, bad input)
# Set VKLLM_TEST_BUILD to reuse a build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${VKLLM_TEST_BUILD:-build-test}
JOBS=$(nproc)
start=$(date +%s)

cmake -S . -B "$BUILD" -G Ninja -DVKLLM_WERROR=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$JOBS"

echo "=== test suite (lavapipe default subgroup size) ==="
ctest --test-dir "$BUILD" --output-on-failure -j2

for width in 128 512; do
  echo "=== kernel tests at LP_NATIVE_VECTOR_WIDTH=$width ==="
  LP_NATIVE_VECTOR_WIDTH=$width ctest --test-dir "$BUILD" -L 'kernels|runtime' --output-on-failure -j2
done

echo "test.sh: all stages passed in $(( $(date +%s) - start )) s"

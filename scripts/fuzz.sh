#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, ASan + UBSan + coverage) and runs each for a bounded time,
# VKLLM_JOBS of them at once (default 2).
#   scripts/fuzz.sh [seconds per fuzzer, default 60]
# Fails on any crash, uncaught exception, hang (> 10 s on one input), leak, out-of-memory
# (> 2 GiB) or sanitizer report; the input that caused it is left in $BUILD/fuzz-artifacts/.
# Reproduce one with: $BUILD/fuzz/fuzz_gguf <file> (or fuzz_tokenizer, fuzz_template, fuzz_grammar, fuzz_image, fuzz_mmproj). Every crasher becomes a doctest case,
# once fixed, among the tests of the folder whose code it broke, named for the fuzzer that found it (e.g.
# tests/serving/answer/test_tool_call_parsing.cpp's "(fuzz_grammar finding)").
# Set VKLLM_FUZZ_BUILD to use another build directory (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
BUILD=${VKLLM_FUZZ_BUILD:-build-fuzz}
JOBS=${VKLLM_JOBS:-2}
CXX_FUZZ=${VKLLM_FUZZ_CXX:-clang++-14}

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER="$CXX_FUZZ" -DVKLLM_FUZZ=ON -DVKLLM_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$JOBS"

# Leaks are findings; so is any UBSan report (the build also makes them fatal).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Symbolized reports where LLVM's symbolizer is installed (package llvm-14); addresses otherwise.
if [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi

mkdir -p "$BUILD/fuzz-artifacts"
# One fuzzer per core at a time (libFuzzer runs on one thread): each still gets its SECONDS_EACH.
run_one() {
  local target=$1 corpus="$BUILD/fuzz-corpus/$1" log="$BUILD/fuzz-$1.log"  # the corpus grows across local runs; seeds stay read-only
  mkdir -p "$corpus"
  # The largest GGUF seed (llama-2-tiny-random, 1.7 MB) must fit whole; libFuzzer's default cap is 1 MiB.
  local max_len=4096
  [ "$target" = gguf ] && max_len=2000000
  [ "$target" = template ] && max_len=32768  # the longest real template is 16 KB
  [ "$target" = mmproj ] && max_len=65536  # the small random mmproj seeds are 20 to 40 KB
  local extra=()
  [ "$target" = template ] && extra=(-dict=fuzz/jinja.dict)
  local status=0
  "$BUILD/fuzz/fuzz_$target" "$corpus" "$BUILD/fuzz-seeds/$target" -max_len=$max_len "${extra[@]}" \
    -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -detect_leaks=1 \
    -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-artifacts/${target}-" >"$log" 2>&1 || status=$?
  echo "$status" >"$BUILD/fuzz-$target.status"
}
targets=(gguf tokenizer template grammar image mmproj)
running=()
for target in "${targets[@]}"; do
  echo "=== fuzz_$target for ${SECONDS_EACH} s (log: $BUILD/fuzz-$target.log) ==="
  run_one "$target" &
  running+=($!)
  if [ "${#running[@]}" -ge "$JOBS" ]; then
    wait "${running[0]}"
    running=("${running[@]:1}")
  fi
done
wait
summary=()
for target in "${targets[@]}"; do
  log="$BUILD/fuzz-$target.log"
  status=$(cat "$BUILD/fuzz-$target.status")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  units=$(find "$BUILD/fuzz-corpus/$target" -type f | wc -l)
  if [ "$status" != 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    tail -n 60 "$log"
    echo "fuzz.sh: fuzz_$target FAILED (exit $status); inputs: $(ls "$BUILD/fuzz-artifacts" | tr '\n' ' ')"
    exit 1
  fi
  summary+=("fuzz_$target: ${execs:-?} executions, ${rate:-?} exec/s, corpus $units new units")
done
printf 'fuzz.sh: all fuzzers clean:\n'
printf '  %s\n' "${summary[@]}"

#!/usr/bin/env bash
# The one-command GPU check, run from the bundle that scripts/device_bundle.sh makes:
#   OUT=DIR build-device/device_check.sh           a GPU machine: the whole check, ~3 minutes on an H100
#   OUT=DIR build-device/device_check.sh --quick   the dry run (lavapipe, CI): a few tests, stories260K only
# It needs nothing from the machine but bash, coreutils, xz (or python3), a Vulkan driver, dpkg-deb (only
# where the system lacks glvnd) and python3 (for the summary). Steps, each bounded by its own time limit
# cut to what is left of the whole check's, so that the summary is written in time:
#   1. the device as vkllm sees it (`vkllm devices --json`)
#   2. the kernel, runtime, model and serving tests on this device, Khronos validation on (every
#      test file its own process, in parallel); the C API's golden story
#   2b. where the device reports cooperative matrices: their kernel and model tests again on sid's
#      runtime (llama-sid.tar.xz: glibc, loader and a validation layer that knows the extension)
#   3. `vkllm tune` on the largest model (its shapes at 512-token prompt chunks), then random-weight
#      models written here by `vkllm gen-model` (TinyLlama-shaped Q4_0, two layers of
#      Mixtral 8x7B in Q4_0 (a mixture of experts), a Q4_K_M with Llama-3-8B's layer shapes), then
#      `vkllm bench` beside llama.cpp's `llama-bench -ngl 99` on the same files (stories260K too)
#      and the largest once more with --profile (GPU time per op) at 512-token prefill chunks;
#      constrained decode: `vkllm bench --json-schema-file bench_schema.json` on a TinyLlama-shaped
#      Q4_0 with Llama 3's 128k-token vocabulary (stories260K in --quick), tokens/s with and
#      without the schema and the host's time choosing a token
#   3c. llama.cpp at its best: Debian sid's llama-bench (shaders with both cooperative-matrix
#      extensions; llama-sid.tar.xz) on the quantized models at -ub 512, -fa 0 and 1, beside `vkllm
#      bench --ubatch 512`; the matrix cores its log names go into the summary
#   3d. an image encode: `vkllm bench --mmproj --image` with a Gemma-3-sized vision encoder
#   3e. speculative decoding: `vkllm bench --lookup` on the largest model (the cost of verifying k
#      drafts against decoding one token; tokens/s with and without prompt-lookup drafts)
#   3f. CacheBlend: `vkllm bench-blend` on the largest model, 4 documents of 512 tokens (96 in --quick):
#      time to first token with a full prefill and with the documents blended from the cache
#   4. `vkllm bench-ops --shapes llama3-8b` (small in --quick)
#   5. the other matvec path beside the default: `--caps no-int-dot` where the device takes the
#      integer-dot kernels (its packed dot is accelerated), else `--caps int-dot` where it has the
#      extension: `vkllm bench` on the quantized models, and `bench-ops --ops matvec,matmul --kernels
#      all`: every row of the linear-kernel table the device runs (cooperative matrix, integer dot, float)
# Writes DIR/summary.json and DIR/summary.txt, plus check.log, devices.json, tests_failed.log,
# bench.log and profile.txt (at most 8 files: what the device tool brings back).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    *) echo "device_check.sh: unknown argument '$a' (only --quick)" >&2; exit 2 ;;
  esac
done
if [ -z "${OUT:-}" ]; then echo "device_check.sh: set OUT to the folder for summary.json and summary.txt" >&2; exit 2; fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/summary.json "$OUT"/summary.txt "$OUT"/profile.txt  # never read a previous run's
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vkllm-check.XXXXXX")
START=$(date +%s)
# Every step's time limit is cut to what is left of the whole check's (VKLLM_CHECK_SECONDS, default
# 420), less a reserve for the steps after it, so that the summary is written in time.
DEADLINE=$((START + ${VKLLM_CHECK_SECONDS:-420}))
limit() {  # wanted-seconds reserve-seconds
  local left=$((DEADLINE - $(date +%s) - $2))
  if [ "$left" -lt "$1" ]; then echo $((left > 5 ? left : 5)); else echo "$1"; fi
}
# A step past its limit gets SIGTERM, and SIGKILL 5 s later.
run_limited() {  # seconds command...
  local s=$1
  shift
  timeout -k 5 "$s" "$@"
}
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/check.log" >&2; }
: >"$OUT/check.log"

# --- environment: our libraries first; the validation layer from the bundle ---
mkdir -p "$WORK/bundle" "$WORK/cache" "$WORK/models" "$WORK/scratch" "$WORK/tests" "$WORK/bench"
# xz archives; python3's lzma where the image has no xz.
unpack() {  # archive folder
  if command -v xz >/dev/null; then tar -xJf "$1" -C "$2"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; fi
}
unpack "$HERE/payload.tar.xz" "$WORK/bundle"
B=$WORK/bundle
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VK_LAYER_PATH="$B/layers"
export XDG_CACHE_HOME="$WORK/cache"
export VKLLM_TEST_MODELS_DIR="$HERE/models" VKLLM_TEST_SCRATCH_DIR="$WORK/scratch"
# A driver whose manifest sits outside the loader's search path (NVIDIA's container mounts).
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] &&
   ! ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json /usr/local/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/icd.d/nvidia_icd.json; do
    if [ -f "$f" ]; then export VK_DRIVER_FILES="$f" VK_ICD_FILENAMES="$f"; log "driver manifest: $f"; break; fi
  done
fi
# NVIDIA's Vulkan driver (libGLX_nvidia) needs glvnd's libGLdispatch; a bare image may lack it, and
# the driver's own folder may be outside the linker's cache.
if ! grep -q 'libGLdispatch.so.0' <<<"$(ldconfig -p 2>/dev/null)"; then
  mkdir -p "$WORK/gl"
  for f in "$HERE"/gl/*.deb; do [ -f "$f" ] && dpkg-deb -x "$f" "$WORK/gl"; done
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$WORK/gl/usr/lib/x86_64-linux-gnu"
  log "glvnd from the bundle"
fi
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
VKLLM="$B/bin/vkllm"
PEER="$B/peer/llama-bench"
# Debian sid's llama-bench runs on sid's glibc through sid's loader, with the driver's folders but
# not the bundle's Debian 12 libraries on its path; ggml finds its backends in the current folder.
SID=""
if [ -f "$HERE/llama-sid.tar.xz" ]; then
  mkdir -p "$WORK/llama-sid" && unpack "$HERE/llama-sid.tar.xz" "$WORK/llama-sid" && SID=$WORK/llama-sid
fi
peer_sid() {  # seconds llama-bench-arguments...
  local s=$1 path=$SID/lib d
  shift
  for d in ${LD_LIBRARY_PATH//:/ }; do [ "$d" = "$B/lib" ] || path="$path:$d"; done
  # A CPU device (lavapipe, the dry run) only where asked: ggml skips CPU devices unless told.
  (cd "$SID/backends" && timeout -k 5 "$s" env -u LD_LIBRARY_PATH -u VK_LAYER_PATH \
    ${PEER_SID_DEVICES:+GGML_VK_VISIBLE_DEVICES=$PEER_SID_DEVICES} \
    "$SID/lib/ld-linux-x86-64.so.2" --library-path "$path" "$SID/llama-bench" "$@")
}
JOBS=$(nproc)

# --- 1. the device ---
log "device"
if command -v nvidia-smi >/dev/null; then
  timeout -k 5 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv >"$WORK/nvidia-smi.csv" 2>&1
fi
run_limited "$(limit 60 300)" "$VKLLM" devices --json >"$WORK/devices.json" 2>"$WORK/devices.err" || log "vkllm devices failed: $(cat "$WORK/devices.err")"

# --- 3a. models, written while the tests run (gen-model is CPU work) ---
models=("$HERE/models/stories260K.gguf")
if [ "$QUICK" = 0 ]; then
  log "gen-model: tinyllama q4_0, mixtral-layers q4_0, llama3-8b-shaped q4_k_m (${VKLLM_CHECK_LLAMA3_LAYERS:-32} layers)"
  (
    run_limited "$(limit 120 250)" "$VKLLM" gen-model -o "$WORK/models/tinyllama-q4_0.gguf" --preset tinyllama --type q4_0 &&
    run_limited "$(limit 240 200)" "$VKLLM" gen-model -o "$WORK/models/llama3-8b-shape-q4_k_m.gguf" --preset llama3-8b \
      --layers "${VKLLM_CHECK_LLAMA3_LAYERS:-32}" --type q4_k_m
    run_limited "$(limit 90 190)" "$VKLLM" gen-model -o "$WORK/models/mixtral-layers-q4_0.gguf" --arch llama --dim 4096 \
      --heads 32 --kv-heads 8 --layers 2 --ffn 14336 --experts 8 --experts-used 2 --vocab 32000 --ctx 4096 --type q4_0
    gunzip -c "$HERE/models/ggml-vocab-llama-bpe.gguf.gz" >"$WORK/models/vocab-llama3.gguf" &&
    run_limited "$(limit 90 180)" "$VKLLM" gen-model -o "$WORK/models/tinyllama-llama3-vocab-q4_0.gguf" --preset tinyllama \
      --vocab-from "$WORK/models/vocab-llama3.gguf" --type q4_0
  ) >"$WORK/gen-model.log" 2>&1 &
  gen_pid=$!
  # the largest last: the profile step reads it
  models+=("$WORK/models/tinyllama-q4_0.gguf" "$WORK/models/mixtral-layers-q4_0.gguf" "$WORK/models/llama3-8b-shape-q4_k_m.gguf")
fi

# --- 2. tests ---
# tests.txt: "executable source-stem" per line (device_bundle.sh lists them); --quick takes the
# lines of tests-quick.txt.
list="$HERE/tests.txt"
if [ "$QUICK" = 1 ]; then list="$HERE/tests-quick.txt"; fi
log "tests: $(wc -l <"$list") files, $JOBS at a time, 180 s each at most, all of them done 200 s before the end"
# Each test's limit is taken when it starts (files wait for a free job), so the last ones still end
# in time. A file whose filter matched no test case fails: a stale list must not pass for green.
run_one() {  # exe stem
  local exe=$1 stem=$2 rc
  run_limited "$(limit 180 200)" "$B/bin/$exe" "--source-file=*/$stem.cpp" --duration=false >"$WORK/tests/$exe.$stem.log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && grep -q 'test cases: *0 |' "$WORK/tests/$exe.$stem.log"; then rc=3; fi
  echo "$exe.$stem $rc" >>"$WORK/tests/results"
}
export -f run_one limit run_limited
export B WORK DEADLINE
xargs -r -a "$list" -P "$JOBS" -L 1 bash -c 'run_one "$0" "$1"'
golden_rc=0
run_limited "$(limit 60 150)" "$B/bin/capi_smoke" "$HERE/models/stories260K.gguf" "$HERE/models/stories260K.greedy200.txt" --validation \
  >"$WORK/tests/capi.smoke.log" 2>&1 || golden_rc=$?
echo "capi.smoke $golden_rc" >>"$WORK/tests/results"
: >"$OUT/tests_failed.log"
while read -r name rc; do
  if [ "$rc" != 0 ]; then
    { echo "===== $name: exit $rc$( [ "$rc" = 124 ] && echo ' (time limit)')"; tail -c 20000 "$WORK/tests/$name.log"; } >>"$OUT/tests_failed.log"
  fi
done <"$WORK/tests/results"
# The cooperative-matrix cases: Debian 12's validation layer (above) predates the extension, so
# vkllm turns it off under that layer and these cases skip there; on sid's runtime (its glibc,
# loader and validation layer, from llama-sid.tar.xz) they run, and must (VKLLM_TEST_REQUIRE_COOPMAT).
if [ -n "$SID" ] && grep -q '"cooperative_matrix": true' "$WORK/devices.json" 2>/dev/null; then
  for t in "test_runtime *coopmat*,kernel?table*,attention?prefill?on?the?matrix*" "test_model *coopmat*"; do
    set -- $t
    log "cooperative-matrix tests on sid's runtime: $1 -tc='$2'"
    path=$SID/lib:$B/lib
    for d in ${LD_LIBRARY_PATH//:/ }; do [ "$d" = "$B/lib" ] || path="$path:$d"; done
    run_limited "$(limit 240 150)" env -u LD_LIBRARY_PATH VK_LAYER_PATH="$SID/layers" VKLLM_TEST_REQUIRE_COOPMAT=1 \
      "$SID/lib/ld-linux-x86-64.so.2" --library-path "$path" "$B/bin/$1" "--test-case=$2" --duration=false \
      >"$WORK/tests/coopmat.$1.log" 2>&1
    rc=$?
    echo "coopmat.$1 $rc" >>"$WORK/tests/results"
    [ "$rc" = 0 ] || { echo "===== coopmat.$1: exit $rc"; tail -c 20000 "$WORK/tests/coopmat.$1.log"; } >>"$OUT/tests_failed.log"
  done
fi
log "tests: $(awk '$2==0' "$WORK/tests/results" | wc -l) passed, $(awk '$2!=0' "$WORK/tests/results" | wc -l) failed"

# --- 3b. vkllm bench beside llama-bench on the same files ---
if [ "$QUICK" = 1 ]; then pp=32 tg=16 reps=1; else pp=512 tg=128 reps=3; fi
if [ -n "${gen_pid:-}" ]; then wait "$gen_pid" || log "gen-model failed: $(tail -3 "$WORK/gen-model.log")"; fi
# The device's own tuning first (the same cache folder as every bench below, which reads it): the
# largest model's shapes at the 512-token prefill chunks step 3c compares (32 in --quick).
if [ -f "${models[-1]}" ]; then
  if [ "$QUICK" = 1 ]; then tune_ub=32; else tune_ub=512; fi
  log "tune --ubatch $tune_ub: $(basename "${models[-1]}" .gguf)"
  run_limited "$(limit 90 150)" "$VKLLM" tune -m "${models[-1]}" --ubatch "$tune_ub" -r 3 --json >"$WORK/bench/tune.json" \
    2>>"$OUT/bench.log" || log "vkllm tune failed"
fi
: >"$OUT/bench.log"
i=0
for m in "${models[@]}"; do
  i=$((i + 1))
  [ -f "$m" ] || { log "bench: $m missing"; continue; }
  name=$(basename "$m" .gguf)
  log "bench: $name (pp $pp, tg $tg, $reps reps)"
  run_limited "$(limit 100 100)" "$VKLLM" bench -m "$m" -p "$pp" -n "$tg" -r "$reps" --json >"$WORK/bench/vk.$i.json" 2>>"$OUT/bench.log" ||
    log "vkllm bench $name failed"
  [ -x "$PEER" ] || continue
  run_limited "$(limit 100 80)" "$PEER" -m "$m" -p "$pp" -n "$tg" -r "$reps" -ngl 99 -o json >"$WORK/bench/peer.$i.json" 2>>"$OUT/bench.log" ||
    log "llama-bench $name failed"
done

# --- 3c. llama.cpp at its best, beside vkllm at the same 512-token prefill chunks ---
if [ -n "$SID" ]; then
  if [ "$QUICK" = 1 ]; then sid_models=("$HERE/models/stories260K.gguf") ub=32 PEER_SID_DEVICES=0; else sid_models=("${models[@]:1}") ub=512 PEER_SID_DEVICES=""; fi
  cp "$SID/VERSION" "$WORK/bench/sid.version"
  i=0
  for m in "${sid_models[@]}"; do
    i=$((i + 1))
    [ -f "$m" ] || continue
    name=$(basename "$m" .gguf)
    log "llama-bench (Debian sid) -ub $ub -fa 0,1: $name; vkllm bench --ubatch $ub"
    peer_sid "$(limit 120 80)" -m "$m" -p "$pp" -n "$tg" -r "$reps" -ngl 99 -ub "$ub" -fa 0,1 -o json \
      >"$WORK/bench/sid.$i.json" 2>"$WORK/bench/sid.$i.log" || log "llama-bench (sid) $name failed: $(tail -2 "$WORK/bench/sid.$i.log")"
    grep -m1 -o 'matrix cores: [A-Za-z0-9_]*' "$WORK/bench/sid.$i.log" >"$WORK/bench/sid.matrix" 2>/dev/null
    cat "$WORK/bench/sid.$i.log" >>"$OUT/bench.log"
    run_limited "$(limit 100 80)" "$VKLLM" bench -m "$m" -p "$pp" -n "$tg" -r "$reps" --ubatch "$ub" --no-probes --json \
      >"$WORK/bench/vkub.$i.json" 2>>"$OUT/bench.log" || log "vkllm bench --ubatch $ub $name failed"
  done
else
  log "no llama-sid.tar.xz: llama.cpp with matrix cores not compared"
fi

# Constrained decode: tokens/s with the JSON schema against without, and the host's share.
if [ "$QUICK" = 1 ]; then cm="$HERE/models/stories260K.gguf" cn=16 cr=1; else cm="$WORK/models/tinyllama-llama3-vocab-q4_0.gguf" cn=64 cr=3; fi
if [ -f "$cm" ]; then
  log "bench --json-schema-file: $(basename "$cm" .gguf)"
  run_limited "$(limit 60 90)" "$VKLLM" bench -m "$cm" -p 16 -n "$cn" -r "$cr" --no-probes --json-schema-file "$HERE/bench_schema.json" \
    --json >"$WORK/bench/schema.json" 2>>"$OUT/bench.log" || log "vkllm bench --json-schema-file failed"
else
  log "constrained decode: $cm missing"
fi

# The largest model once more with the GPU time per op (timestamp queries) and 512-token prefill
# chunks, llama-bench's batch: where the time goes, for tuning.
if [ "$QUICK" = 0 ] && [ -f "${models[-1]}" ]; then
  log "bench --profile --ubatch 512: $(basename "${models[-1]}" .gguf)"
  run_limited "$(limit 60 90)" "$VKLLM" bench -m "${models[-1]}" -p "$pp" -n 32 -r 1 --ubatch 512 --profile --no-probes \
    >"$OUT/profile.txt" 2>>"$OUT/bench.log" || log "bench --profile failed"
fi

# --- 3d. image encode: a Gemma-3-sized vision encoder (SigLIP so400m: 1152 x 27, 896 px tiles of
# 14 px patches, 4096 patches) on a 896 x 896 picture, `vkllm bench --mmproj --image` (a small
# encoder in --quick). vkllm only: llama.cpp's libmtmd is not in the bundle (its Vulkan backend
# alone would take the bundle past the device tool's size), so the lavapipe comparison
# (scripts/bench_vision_peer.sh) stands for the peer.
if [ "$QUICK" = 1 ]; then vit=(--image-size 224 --patch-size 14) vside=224; else
  vit=(--vit-dim 1152 --vit-layers 27 --vit-heads 16 --vit-ffn 4304 --image-size 896 --patch-size 14) vside=896; fi
log "vision: gen-model --mmproj gemma3 ${vit[*]}; bench --mmproj --image (${vside} px)"
if run_limited "$(limit 60 90)" "$VKLLM" gen-model --arch gemma3 --dim 256 --layers 1 --heads 4 --ffn 512 --vocab 512 \
  --type f16 -o "$WORK/models/vision-text.gguf" --mmproj gemma3 "${vit[@]}" >>"$OUT/bench.log" 2>&1 &&
  python3 - "$WORK/models/picture.png" "$vside" <<'PY'
import struct, sys, zlib
path, n = sys.argv[1], int(sys.argv[2])
raw = b''.join(b'\x00' + bytes(v for x in range(n) for v in (((x * 131 + y * 71) ^ (x * y)) & 255, (x * 7 + y * 3) & 255, (x * y) & 255)) for y in range(n))
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', n, n, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
PY
then
  run_limited "$(limit 60 90)" "$VKLLM" bench -m "$WORK/models/vision-text.gguf" --mmproj "$WORK/models/vision-text-mmproj.gguf" \
    --image "$WORK/models/picture.png" -p 0 -n 0 -r 3 --no-probes --json >"$WORK/bench/vision.json" 2>>"$OUT/bench.log" ||
    log "vkllm bench --mmproj failed"
else
  log "vision: the encoder or the picture could not be written"
fi

# --- 3e. speculative decoding: `vkllm bench --lookup` on the largest model: the cost of verifying
# k = 1, 2, 4, 8 drafts in one step against decoding one token (what a GPU's idle arithmetic makes of
# it), and greedy generation with and without prompt-lookup drafts. A random-weight model's greedy
# text soon repeats itself, which lookup drafts: its acceptance is the text's, not a real model's.
log "speculative decoding: bench --lookup --draft-max 8 on $(basename "${models[-1]}" .gguf)"
run_limited "$(limit 60 60)" "$VKLLM" bench -m "${models[-1]}" --lookup --draft-max 8 -p 0 -n 128 -r 1 --no-probes --json \
  >"$WORK/bench/speculative.json" 2>>"$OUT/bench.log" || log "vkllm bench --lookup failed"

# --- 3f. CacheBlend: `vkllm bench-blend` on the largest model: documents cut from a text, cached
# alone, then put after a new prefix in another order with a question; time to first token with a
# full prefill and blended (selection in layer 0 and 1's V, 15% recomputed with the question), and
# the blended run's agreement with the full prefill. Random weights: the quality figures are those
# of a model that attends anywhere; the time is what the issue measures.
if [ "$QUICK" = 1 ]; then blend_tokens=96 blend_ub=64; else blend_tokens=512 blend_ub=512; fi
log "CacheBlend: bench-blend --chunks 4 --chunk-tokens $blend_tokens on $(basename "${models[-1]}" .gguf)"
run_limited "$(limit 60 60)" "$VKLLM" bench-blend -m "${models[-1]}" -f "$HERE/blend_text.txt" --chunks 4 \
  --chunk-tokens "$blend_tokens" --ubatch "$blend_ub" -r 3 --json >"$WORK/bench/blend.json" 2>>"$OUT/bench.log" ||
  log "vkllm bench-blend failed"

# --- 4. bench-ops ---
if [ "$QUICK" = 1 ]; then shapes=small; else shapes=llama3-8b; fi
log "bench-ops --shapes $shapes"
run_limited "$(limit 90 10)" "$VKLLM" bench-ops --shapes "$shapes" --json >"$WORK/bench/ops.json" 2>>"$OUT/bench.log" || log "bench-ops failed"

# --- 5. the other matvec path ---
alt=""
if grep -q '"integer_dot_kernels": true' "$WORK/devices.json" 2>/dev/null; then alt=no-int-dot
elif grep -q '"integer_dot_product": true' "$WORK/devices.json" 2>/dev/null; then alt=int-dot; fi
if [ -n "$alt" ]; then
  echo "$alt" >"$WORK/bench/alt_caps"
  i=0
  for m in "${models[@]}"; do
    i=$((i + 1))
    [ -f "$m" ] && [ "$(basename "$m")" != stories260K.gguf ] || continue  # F32: no integer-dot path
    log "bench --caps $alt: $(basename "$m" .gguf)"
    run_limited "$(limit 60 60)" "$VKLLM" bench -m "$m" -p "$pp" -n "$tg" -r "$reps" --no-probes --caps "$alt" --json \
      >"$WORK/bench/alt.$i.json" 2>>"$OUT/bench.log" || log "vkllm bench --caps $alt failed"
  done
  log "bench-ops --ops matvec,matmul --caps $alt"
  run_limited "$(limit 40 10)" "$VKLLM" bench-ops --shapes "$shapes" --ops matvec,matmul --types q4_0,q8_0,q4_k,q6_k \
    --caps "$alt" --kernels all --json >"$WORK/bench/ops_alt.json" 2>>"$OUT/bench.log" || log "bench-ops --caps $alt failed"
fi

# --- summary ---
cp "$WORK/devices.json" "$OUT/devices.json" 2>/dev/null
if command -v python3 >/dev/null; then
  run_limited 30 python3 "$HERE/check_summary.py" "$WORK" "$OUT" "$(( $(date +%s) - START ))" "$QUICK" || log "summary failed"
else
  log "no python3: summary.txt only has the log"; cp "$OUT/check.log" "$OUT/summary.txt"
fi
rm -rf "$WORK"
log "done"
grep -q '"tests_failed": 0' "$OUT/summary.json" 2>/dev/null

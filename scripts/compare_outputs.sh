#!/usr/bin/env bash
# Before/after evidence for a change that must not alter behaviour (a reshape, a refactor): two
# vkllm binaries run the same inputs and every output is compared byte for byte.
#   scripts/compare_outputs.sh OLD_VKLLM NEW_VKLLM [WORKDIR]     (exit 1 on any difference)
# Inputs: stories260K (../shared/models beside the checkout): its greedy 200-token story and its
# perplexity over tests/fixtures/perplexity/stories.txt; files that OLD_VKLLM generates once into
# WORKDIR/models (gen-model, stories15m shapes): llama q4_k_m, qwen3moe q8_0, deepseek2 f16 (latent
# attention, a dense lead layer, a shared expert), gemma2 q5_k_m (window 8), gpt-oss mxfp4, gpt2
# q8_0, t5 f16, bert f16. Per file: greedy text on the default path and with --caps int-dot, the
# per-op dispatch counts of one decode step and one prefill chunk (bench --profile), bert's
# embedding; the llama file split over two devices where Mesa 25 is unpacked (.cache/mesa25).
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1") NEW=$(realpath "$2")
WORK=${3:-/tmp/vkllm-compare}
M=$WORK/models S=../shared/models/stories260K.gguf TEXT=tests/fixtures/perplexity/stories.txt
mkdir -p "$M"
gen() { [ -f "$M/$1.gguf" ] || "$OLD" gen-model -o "$M/$1.gguf" --preset stories15m "${@:2}" >/dev/null 2>&1; }
gen llama --type q4_k_m
gen qwen3moe --arch qwen3moe --type q8_0 --experts 8 --experts-used 2 --expert-ffn 256
gen deepseek2 --arch deepseek2 --type f16 --experts 8 --experts-used 2 --expert-ffn 128 --kv-lora 64 --q-lora 96 \
  --rope-dim 16 --v-head-dim 32 --dense-layers 1 --shared-experts 1
gen gemma2 --arch gemma2 --type q5_k_m --window 8
gen gptoss --arch gpt-oss --type mxfp4 --experts 8 --experts-used 2 --expert-ffn 128
gen gpt2 --arch gpt2 --type q8_0
gen t5 --arch t5 --type f16
gen bert --arch bert --type f16

# The ops and their calls, sorted (bench lists them by time, which varies).
dispatches() {
  python3 -c 'import json,sys; r=json.load(sys.stdin); r=r["results"][0] if "results" in r else r
for ph,p in r.get("profile",{}).items():
    for o in p["ops"]: print(ph, o["op"], o["calls"])' | sort
}
run_all() {  # binary, output folder
  local V=$1 O=$2
  mkdir -p "$O"
  "$V" run -m "$S" -p "" -n 200 --temp 0 >"$O/stories.greedy" 2>/dev/null
  "$V" perplexity -m "$S" -f "$TEXT" -c 128 --chunks 4 >"$O/stories.ppl" 2>/dev/null
  for m in llama qwen3moe deepseek2 gemma2 gptoss gpt2 t5; do
    "$V" run -m "$M/$m.gguf" -p "Once upon a time" -n 24 --temp 0 --ctx 256 >"$O/$m.greedy" 2>/dev/null
    "$V" run -m "$M/$m.gguf" -p "Once upon a time" -n 24 --temp 0 --ctx 256 --caps int-dot >"$O/$m.intdot.greedy" 2>/dev/null
    [ "$m" = t5 ] && continue  # bench runs decoder-only models
    "$V" bench -m "$M/$m.gguf" -p 16 -n 4 -r 1 --ubatch 16 --profile --json --no-probes 2>/dev/null | dispatches >"$O/$m.dispatches"
  done
  "$V" embed -m "$M/bert.gguf" -p "Once upon a time" >"$O/bert.embed" 2>/dev/null
  if [ -f .cache/mesa25/lvp_icd.json ]; then
    VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json:$PWD/.cache/mesa25/lvp_icd.json \
      LD_LIBRARY_PATH=$PWD/.cache/mesa25/lib "$V" run -m "$M/llama.gguf" -p "Hello" -n 16 --temp 0 --devices 0,1 \
      >"$O/llama.split.greedy" 2>/dev/null
  fi
}
run_all "$OLD" "$WORK/old"
run_all "$NEW" "$WORK/new"
diffs=0 n=0
for f in "$WORK"/old/*; do
  n=$((n + 1))
  b=$(basename "$f")
  if [ ! -s "$f" ]; then echo "empty: old/$b (the old binary failed on it)"; diffs=$((diffs + 1)); continue; fi
  cmp -s "$f" "$WORK/new/$b" || { echo "differs: $b"; diffs=$((diffs + 1)); }
done
echo "compare_outputs: $n outputs, $diffs differ or are missing ($WORK/old, $WORK/new)"
[ "$diffs" = 0 ]

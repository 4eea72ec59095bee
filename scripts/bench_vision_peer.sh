#!/usr/bin/env bash
# Image encoding speed, vkllm beside llama.cpp (build 9749's llama-server --mmproj on its Vulkan
# backend) on the same random files, the same picture and the same device:
#   scripts/bench_vision_peer.sh [BUILD_DIR] [WORK_DIR]
# For each projector type (gemma3, idefics3, mlp) at a small shape (gen-model's default ViT) and a
# realistic one (ViT dim 768, 12 layers, 12 heads, ffn 3072, 224 px tiles of 14 px patches: 256
# patches, as a ViT-B/14), it writes a text model and its mmproj, times vkllm's encode (`vkllm bench
# --mmproj --image`: one warm-up, then the median of REPS runs) and llama-server's ("image slice
# encoded in N ms" in its log, summed over an image's slices: one warm-up request, then the median of
# REPS requests, prompt caching off), and prints a Markdown table. llama.cpp logs whole
# milliseconds, so its small-shape figures are coarse.
# Environment: PEER (default /work/shared/peer/bin), REPS (default 5), CASES (default all six, e.g.
# "gemma3:small mlp:real"), VKLLM_DEVICE / GGML_VK_VISIBLE_DEVICES (default 0: the first device,
# lavapipe on a machine without a GPU).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
WORK="${2:-$(mktemp -d /tmp/vkllm-bench-vision.XXXXXX)}"
PEER="${PEER:-/work/shared/peer/bin}"
REPS="${REPS:-5}"
CASES="${CASES:-gemma3:small idefics3:small mlp:small gemma3:real idefics3:real mlp:real}"
export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
mkdir -p "$WORK"
cd "$WORK"
[ -x "$BUILD/vkllm" ] || { echo "bench_vision_peer.sh: no $BUILD/vkllm (build the vkllm target)" >&2; exit 1; }
[ -x "$PEER/llama-server" ] || { echo "bench_vision_peer.sh: no $PEER/llama-server" >&2; exit 1; }

# The picture: 224 x 224 (a whole tile of the realistic shapes, resized down for the small ones).
python3 - <<'PY'
import zlib, struct
w = h = 224
raw = b''.join(b'\x00' + bytes(v for x in range(w) for v in (((x*131+y*71)^(x*y)) & 255, (x*7+y*3) & 255, (x*y) & 255)) for y in range(h))
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open('picture.png', 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
PY

# The peer's encode time for one image: the median over REPS requests after a warm-up request.
peer_ms() {
  local text=$1 mmproj=$2 log=$3 port=$((18100 + RANDOM % 800)) pid m
  "$PEER/llama-server" -m "$text" --mmproj "$mmproj" -ngl 99 --port "$port" -t 2 -c 2048 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do curl -s "localhost:$port/health" | grep -q ok && break; sleep 0.5; done
  m=$(curl -s "localhost:$port/props" | python3 -c "import json,sys; print(json.load(sys.stdin)['media_marker'])")
  python3 - "$m" picture.png >req.json <<'PY'
import base64, json, sys
print(json.dumps({"prompt": {"prompt_string": "Look: " + sys.argv[1] + " now",
                             "multimodal_data": [base64.b64encode(open(sys.argv[2], 'rb').read()).decode()]},
                  "n_predict": 1, "temperature": 0, "cache_prompt": False}))
PY
  for _ in $(seq 0 "$REPS"); do
    curl -s "localhost:$port/completion" -d @req.json >/dev/null
    echo "--- request" >>"$log"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  # Sum each request's slice times, drop the warm-up request, take the median.
  python3 - "$log" <<'PY'
import re, statistics, sys
per, cur = [], 0
for line in open(sys.argv[1], errors='replace'):
    m = re.search(r'slice encoded in (\d+) ms', line)
    if m: cur += int(m.group(1))
    if line.startswith('--- request'): per.append(cur); cur = 0
print(statistics.median(per[1:]) if len(per) > 1 and all(per) else 'nan')
PY
}

printf '| type | shape | tiles | image tokens | vkllm encode ms | llama.cpp encode ms | llama.cpp / vkllm |\n'
printf '|---|---|---|---|---|---|---|\n'
for c in $CASES; do
  type=${c%%:*} size=${c##*:}
  case $type in gemma3) arch=gemma3 ;; *) arch=llama ;; esac
  if [ "$size" = real ]; then
    vit="--vit-dim 768 --vit-layers 12 --vit-heads 12 --vit-ffn 3072 --image-size 224 --patch-size 14"
    shape="ViT 768 x 12, 224/14"
  else
    vit=""
    shape="ViT 64 x 2, default tile"
  fi
  # shellcheck disable=SC2086
  "$BUILD/vkllm" gen-model --arch "$arch" --dim 256 --layers 1 --heads 4 --ffn 512 --vocab 512 --type f16 \
    --seed 55 -o "text-$type-$size.gguf" --mmproj "$type" $vit 2>/dev/null
  "$BUILD/vkllm" bench -m "text-$type-$size.gguf" --mmproj "text-$type-$size-mmproj.gguf" --image picture.png \
    -p 0 -n 0 -r "$REPS" --no-probes --json >"vkllm-$type-$size.json" 2>"vkllm-$type-$size.log"
  read -r tiles tokens ours < <(python3 -c "
import json, sys
i = json.load(open(sys.argv[1]))['results'][0]['vision']['images'][0]
print(i['tiles'], i['image_tokens'], '%.2f' % i['encode_ms'])" "vkllm-$type-$size.json")
  theirs=$(peer_ms "text-$type-$size.gguf" "text-$type-$size-mmproj.gguf" "peer-$type-$size.log")
  ratio=$(python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print('%.2f' % (b / a))" "$ours" "$theirs")
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$type" "$shape" "$tiles" "$tokens" "$ours" "$theirs" "$ratio"
done
echo "(files and logs in $WORK)" >&2

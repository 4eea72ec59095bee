#!/usr/bin/env bash
# Image encoding speed, vkllm beside llama.cpp build 9749 (libmtmd on its Vulkan backend) on the
# same random files, the same picture and the same device:
#   scripts/bench_vision_peer.sh [BUILD_DIR] [WORK_DIR]
# BUILD_DIR holds vkllm and tools/mtmd_oracle (configure with -DVKLLM_MTMD_ORACLE=ON). For each
# projector type (gemma3, idefics3, mlp, qwen2vl_merger, qwen2.5vl_merger) at a small shape
# (gen-model's default ViT) and a realistic one (ViT dim 768, 12 layers, 12 heads, ffn 3072, 224 px tiles of 14 px patches: 256 patches, a
# ViT-B/14), it writes a text model and its mmproj, times vkllm's encode (`vkllm bench --mmproj
# --image`: one warm-up, then the median of REPS runs) and libmtmd's mtmd_encode_chunk, what
# llama-server runs for an image (one first encode, then the median of REPS), and prints a
# Markdown table: each side's median and fastest run, and their ratios (on a shared machine the
# fastest runs are the ones least slowed by other work). Not llama-server itself: build 9749's server logs no per-image encode time, and on
# lavapipe it aborted after its first image request (docs/vision.md, Speed).
# Environment: PEER (default /work/shared/peer/bin), REPS (default 5), CASES (default all six, e.g.
# "gemma3:small mlp:real"), GGML_VK_VISIBLE_DEVICES (default 0: llama.cpp's first Vulkan device,
# lavapipe on a machine without a GPU; vkllm takes its default device), ORACLE_FLASH_ATTN (default
# auto: llama.cpp's choice, as the server's).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
WORK="${2:-$(mktemp -d /tmp/vkllm-bench-vision.XXXXXX)}"
PEER="${PEER:-/work/shared/peer/bin}"
REPS="${REPS:-5}"
CASES="${CASES:-gemma3:small idefics3:small mlp:small qwen2vl_merger:small qwen2.5vl_merger:small gemma3:real idefics3:real mlp:real qwen2vl_merger:real qwen2.5vl_merger:real}"
export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
mkdir -p "$WORK"
cd "$WORK"
[ -x "$BUILD/vkllm" ] || { echo "bench_vision_peer.sh: no $BUILD/vkllm (build the vkllm target)" >&2; exit 1; }
[ -x "$BUILD/mtmd_oracle" ] ||
  { echo "bench_vision_peer.sh: no $BUILD/mtmd_oracle (configure with -DVKLLM_MTMD_ORACLE=ON)" >&2; exit 1; }
[ -f "$PEER/libmtmd.so.0" ] || { echo "bench_vision_peer.sh: no $PEER/libmtmd.so.0" >&2; exit 1; }

# The picture, 224 x 224 (a whole tile of the realistic shapes, resized down for the small ones): a
# PNG for vkllm, the same pixels raw for libmtmd.
python3 - <<'PY'
import zlib, struct
w = h = 224
pixels = [bytes(v for x in range(w) for v in (((x*131+y*71)^(x*y)) & 255, (x*7+y*3) & 255, (x*y) & 255)) for y in range(h)]
open('picture.rgb', 'wb').write(b''.join(pixels))
raw = b''.join(b'\x00' + row for row in pixels)
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
open('picture.png', 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
PY

# The peer's encode time for the picture: libmtmd's mtmd_encode_chunk (what llama-server runs for
# an image) on llama.cpp's Vulkan backend, timed in one process: the median of REPS encodes after
# a first one, summed over the image's chunks (Idefics3's slices).
peer_ms() {
  GGML_VK_VISIBLE_DEVICES="$GGML_VK_VISIBLE_DEVICES" ORACLE_GPU=1 ORACLE_ENCODE_REPS="$REPS" \
    ORACLE_FLASH_ATTN="${ORACLE_FLASH_ATTN:-auto}" \
    "$BUILD/mtmd_oracle" "$PEER" "$1" "$2" picture.rgb 224 224 "peer-$3" "A<__media__>B" 2>"peer-$3.log" |
    tee "peer-$3.txt" | python3 -c "
import re, sys
text = sys.stdin.read()
print(*('%.2f' % sum(float(v) for v in re.findall(what + r' ([0-9.]+) ms', text)) for what in ('median', 'min')))"
}

# B / A to two places.
ratio() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) / float(sys.argv[1])))" "$1" "$2"; }

printf '| type | shape | tiles | image tokens | vkllm encode ms | llama.cpp encode ms | llama.cpp / vkllm | same, fastest runs |\n'
printf '|---|---|---|---|---|---|---|---|\n'
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
  read -r tiles tokens ours ours_min < <(python3 -c "
import json, sys
i = json.load(open(sys.argv[1]))['results'][0]['vision']['images'][0]
print(i['tiles'], i['image_tokens'], '%.2f %.2f' % (i['encode_ms'], i['encode_ms_min']))" "vkllm-$type-$size.json")
  read -r theirs theirs_min < <(peer_ms "text-$type-$size.gguf" "text-$type-$size-mmproj.gguf" "$type-$size")
  printf '| %s | %s | %s | %s | %s (min %s) | %s (min %s) | %s | %s |\n' "$type" "$shape" "$tiles" "$tokens" \
    "$ours" "$ours_min" "$theirs" "$theirs_min" "$(ratio "$ours" "$theirs")" "$(ratio "$ours_min" "$theirs_min")"
done
echo "(files and logs in $WORK)" >&2

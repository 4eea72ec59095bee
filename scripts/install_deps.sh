#!/usr/bin/env bash
# Installs every Debian package vkllm needs to build, run and test.
# Used by the README quick start and by .ci/run, so both install exactly the same set.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  build-essential cmake ninja-build pkg-config
  libvulkan-dev            # Vulkan headers + the loader (libvulkan1), which vkllm opens at run time
  libvulkan-volk-dev       # volk (volk.h + volk.c): loads the loader with dlopen, so nothing links libvulkan
  glslang-tools            # glslangValidator: GLSL -> SPIR-V at build time
  spirv-tools              # spirv-val: every generated module is validated
  libfmt-dev               # formatting
  libcli11-dev             # command-line parsing for apps/
  nlohmann-json3-dev       # --json output of apps/
  libpcre2-dev             # Unicode-aware regexes (\p{L}, \p{N}) for the pre-tokenizers of byte-level BPE vocabs
  libutf8proc-dev          # Unicode decompositions, lowercase and categories for the WordPiece (BERT) tokenizer
  doctest-dev              # unit tests
  mesa-vulkan-drivers      # lavapipe: the CPU Vulkan device the tests run on
  vulkan-validationlayers  # Khronos validation layer: on in every test
  libsentencepiece-dev     # test-only oracle for the tokenizer
  json-schema-test-suite   # test-only oracle: the official JSON Schema Test Suite for the schema compiler
  python3-jsonschema       # test-only oracle: an independent validator for what the schema grammars generate
  clang-14                 # the libFuzzer targets (scripts/fuzz.sh, a stage of scripts/test.sh)
  clang-format             # the C++ style (.clang-format), applied by scripts/format.sh and checked by scripts/test.sh
  libclang-rt-14-dev       # clang's ASan/UBSan runtimes
  libfuzzer-14-dev         # libFuzzer
  libcpp-httplib-dev       # the HTTP server of `vkllm serve`
  libjs-marked             # the chat page's Markdown renderer, built into the binary (serving/webui)
  node-dompurify           # the chat page's HTML sanitizer for what marked renders, built in too
  libedit-dev              # line editing for interactive commands
  libstb-dev               # stb_image: PNG, JPEG, GIF, BMP decoding, the decoder llama.cpp's mtmd uses (same pixels)
  libwebp-dev              # WebP decoding (stb_image has none); the image tests encode with it too
  libjpeg62-turbo-dev      # test-only: the image tests write JPEG inputs with an encoder independent of the decoder
  zlib1g-dev               # bounds what a PNG's data inflates to before stb_image does; the image tests write PNGs with it
  curl                     # scripts/glslang15.sh: Debian 13's glslang source from the Debian archive
  patchelf                 # scripts/device_bundle.sh: RUNPATH $ORIGIN on the bundled executables and libraries
  openjdk-17-jdk-headless  # the Java binding (embed/jni): javac for vkllm.jar, jni.h, and the JVM its tests run on
  nginx                    # test-only: the load balancer of deploy/nginx, run in front of two replicas (tests/e2e/nginx.test.mjs)
  chromium                 # test-only: the headless browser that drives the chat page (tests/e2e/webui.test.mjs)
)
# Node runs the end-to-end tests of `vkllm serve` with the official OpenAI client (tests/e2e). A
# machine that already has node and npm (e.g. from NodeSource) keeps them: Debian's nodejs would
# conflict with that package.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then PKGS+=(nodejs npm); fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
# The exact versions of package-lock.json, from the npm registry.
npm ci --prefix "$(dirname "$0")/../tests/e2e" --no-audit --no-fund --loglevel=error >/dev/null
# Mesa 25 lavapipe (Vulkan 1.4) from bookworm-backports, unpacked into .cache/mesa25 beside the
# system's Mesa 22.3, which stays the default: scripts/test.sh runs the suite on both.
"$(dirname "$0")/mesa25.sh" install >/dev/null
# Mesa 26 lavapipe (VK_KHR_cooperative_matrix) from Debian sid, unpacked outside the checkout: the
# tensor-core kernels' tests run on it (scripts/test.sh).
"$(dirname "$0")/mesa26.sh" install >/dev/null
# glslang 15 (about a minute to build into .cache/glslang15): the cooperative-matrix shaders need it
# and Debian 12's glslang 12 does not know the extension; CMake finds it there.
"$(dirname "$0")/glslang15.sh" install >/dev/null
echo "install_deps: ok"

#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds tests/capi/smoke.c outside the tree against
# it, both ways an app would: pkg-config (vkllm.pc) and CMake (find_package(vkllm)). Each program
# must then generate the published stories260K story.
#   install_test.sh BUILD_DIR MODELS_DIR
set -euo pipefail
build=$1 models=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

for tool in cc pkg-config cmake; do
  command -v "$tool" >/dev/null || { echo "install_test: $tool is missing"; exit 1; }
done
# Installed in one place, used from another: the pkg-config file and the CMake package must both be
# relocatable (a package manager or an app bundle moves the files).
cmake --install "$build" --prefix "$work/staging" >/dev/null
mv "$work/staging" "$prefix"
test -f "$prefix/include/vkllm/vkllm.h"
pc=$(find "$prefix" -name vkllm.pc)
libdir=$(dirname "$(find "$prefix" -name 'libvkllm.so.*' -type f | head -1)")
echo "installed: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

# 1. pkg-config
export PKG_CONFIG_PATH=$(dirname "$pc")
cc -std=c99 -Wall -Wextra -pedantic -Werror "$here/smoke.c" $(pkg-config --cflags --libs vkllm) -o "$work/smoke_pc"
echo "pkg-config: vkllm $(pkg-config --modversion vkllm): $(pkg-config --cflags --libs vkllm)"
LD_LIBRARY_PATH=$libdir "$work/smoke_pc" "$models/stories260K.gguf" "$models/stories260K.greedy200.txt"

# 2. CMake package
cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/consumer/smoke" "$models/stories260K.gguf" "$models/stories260K.greedy200.txt"
echo "install_test: both consumers generated the story"

#!/usr/bin/env bash
# libvkllm.so's dynamic symbol table: its SONAME carries the major version, and it exports exactly
# the functions include/vkllm/vkllm.h declares (VKLLM_API), nothing of the C++ inside.
#   check_symbols.sh LIBVKLLM.so vkllm.h
set -euo pipefail
lib=$1 header=$2
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
major=$(sed -n 's/^#define VKLLM_VERSION_MAJOR \([0-9]*\)/\1/p' "$header")
[ "$soname" = "libvkllm.so.$major" ] || { echo "SONAME is '$soname', expected libvkllm.so.$major"; exit 1; }
# Defined dynamic symbols, less the version node (VKLLM_0, an absolute symbol).
exported=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -v '^#' "$header" | grep -o 'VKLLM_API [^(]*(' | sed 's/($//; s/.*[ *]//' | sort -u)
if [ "$exported" != "$declared" ]; then
  echo "exported symbols differ from the header's VKLLM_API functions:"
  diff <(echo "$declared") <(echo "$exported") || true
  exit 1
fi
echo "SONAME $soname; $(echo "$exported" | wc -l) symbols exported, all declared in vkllm.h:"
echo "$exported" | tr '\n' ' '
echo

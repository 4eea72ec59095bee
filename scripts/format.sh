#!/usr/bin/env bash
# clang-format (Debian's, clang-format 14) over the product's C++ with the repository's .clang-format:
#   scripts/format.sh           rewrites the files in place
#   scripts/format.sh --check   changes nothing; lists every file that differs and fails (a stage of scripts/test.sh)
# The product is everything that ships: apps/ embed/ include/ model/ runtime/ serving/ tools/ fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
command -v "$CLANG_FORMAT" >/dev/null || { echo "format.sh: $CLANG_FORMAT not found (scripts/install_deps.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- 'apps/*.cpp' 'apps/*.h' 'embed/*.cpp' 'embed/*.h' 'embed/*.c' 'include/*.h' \
  'model/*.cpp' 'model/*.h' 'runtime/*.cpp' 'runtime/*.h' 'serving/*.cpp' 'serving/*.h' 'tools/*.cpp' 'fuzz/*.cpp' 'fuzz/*.h')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1; then echo "not formatted: $f"; bad=1; fi
  done
  if [ "$bad" = 1 ]; then echo "format.sh: run scripts/format.sh (clang-format $($CLANG_FORMAT --version | grep -o '[0-9][0-9.]*' | head -1))" >&2; exit 1; fi
  echo "format.sh: ${#files[@]} files formatted"
else
  "$CLANG_FORMAT" -i "${files[@]}"
fi

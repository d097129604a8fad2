#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when an example, a Python binding or an app includes a header that is
# not public (lib/include/grex/*), not its own folder's and not the generated
# grex_version.h. Apps still reach some internals (issue 24, item 5, will move
# them to public APIs): those are listed, file by file, in
# public_includes.allow; a new one fails, and so does a listed one that is gone
# (so the list only shrinks).   check_public_includes.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: check_public_includes.sh SOURCE_ROOT}
cd "$root"
allow=tests/unit/public_includes.allow
found=$(mktemp)
trap 'rm -f "$found"' EXIT
sources() {  # the tracked files in a git checkout, else every file
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -- 'apps/*' 'examples/*' 'python/*'
  else
    find apps examples python -type f
  fi | grep -E '\.(c|cc|cpp|h|hpp)$'
}
while IFS= read -r f; do
  dir=$(dirname "$f")
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while IFS= read -r h; do
    case "$h" in
      grex/*|grex_version.h) continue ;;
    esac
    [[ -f "$dir/$h" ]] && continue  # the app's own header
    echo "$f $h"
  done
done < <(sources) | sort -u > "$found"
bad=0
while IFS= read -r line; do
  if ! grep -qxF "$line" <(grep -v '^#' "$allow"); then
    echo "not public: $line (use a grex/*.h API, or say why in $allow)" >&2
    bad=1
  fi
done < "$found"
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  grep -qxF "$line" "$found" || { echo "$allow lists '$line', which is no longer included: remove it" >&2; bad=1; }
done < "$allow"
((bad == 0)) && echo "public_includes: examples and python include only public headers; apps $(wc -l < "$found") listed internal includes"
exit "$bad"

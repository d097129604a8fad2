#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when an app, an example or a Python binding includes a header that is
# not public. They link libgrex.so (grex_dep) and build as an installed
# program would: they may include grex/*.h, headers of their own folder and
# the system's, never lib/, drivers/ or congestion/ internals (quoted or in
# angle brackets) nor the build's generated grex_version.h.
#   check_public_includes.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: check_public_includes.sh SOURCE_ROOT}
cd "$root"
sources() {  # the files of a git checkout, new ones included; else every file
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- 'apps/*' 'examples/*' 'python/*'
  else
    find apps examples python -type f
  fi | grep -E '\.(c|cc|cpp|h|hpp)$'
}
includes() {  # includes() FILE '"' or '<': the headers FILE includes in that form
  local open=$2 close
  [[ $open == '<' ]] && close='>' || close='"'
  sed -n "s/^[[:space:]]*#[[:space:]]*include[[:space:]]*$open\([^$close]*\)$close.*/\1/p" "$1"
}
bad=0
checked=0
while IFS= read -r f; do
  [[ -f $f ]] || continue  # deleted, not yet staged
  dir=$(dirname "$f")
  checked=$((checked + 1))
  while IFS= read -r h; do
    case "$h" in grex_version.h) ;; grex/*) continue ;; *) [[ -f "$dir/$h" ]] && continue ;; esac
    echo "not public: $f includes \"$h\" (use a grex/*.h API)" >&2
    bad=1
  done < <(includes "$f" '"')
  while IFS= read -r h; do
    case "$h" in grex/*) continue ;; esac
    if [[ $h == grex_version.h || -f lib/$h || -f $h ]]; then
      echo "not public: $f includes <$h> (use a grex/*.h API)" >&2
      bad=1
    fi
  done < <(includes "$f" '<')
done < <(sources)
((bad == 0)) && echo "public_includes: $checked files of apps/, examples/ and python/ include only public headers"
exit "$bad"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures (once) and builds grex.   build.sh [--sanitize | --coverage] [BUILD_DIR]
# --sanitize builds with AddressSanitizer + UndefinedBehaviorSanitizer in build-sanitize/.
# --coverage builds a debug build with gcov instrumentation (-Db_coverage=true) in build-coverage/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sanitize=0
if [[ "${1:-}" == "--sanitize" ]]; then sanitize=1; shift; fi
coverage=0
if [[ "${1:-}" == "--coverage" ]]; then coverage=1; shift; fi
dir=${1:-$root/$([[ $sanitize == 1 ]] && echo build-sanitize || echo build)}
[[ $coverage == 1 && -z "${1:-}" ]] && dir=$root/build-coverage
if [[ ! -f "$dir/build.ninja" ]]; then
  args=(--buildtype=release)
  # Sanitized builds leave out the PyTorch extension: Python cannot load an ASan module.
  [[ $sanitize == 1 ]] && args=(--buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false -Dtorch=disabled)
  [[ $coverage == 1 ]] && args=(--buildtype=debug -Db_coverage=true)
  mkdir -p "$dir"
  if ! meson setup "$dir" "$root" "${args[@]}" > "$dir/../.meson-setup-$(basename "$dir").log" 2>&1; then
    cat "$dir/../.meson-setup-$(basename "$dir").log" >&2
    exit 1
  fi
fi
if ! ninja -C "$dir" > "$dir/ninja.log" 2>&1; then
  tail -60 "$dir/ninja.log" >&2
  exit 1
fi
echo "$dir"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures (once) and builds grex.   build.sh [--sanitize|--tsan] [BUILD_DIR]
# --sanitize builds with AddressSanitizer + UndefinedBehaviorSanitizer in build-sanitize/.
# --tsan builds with ThreadSanitizer in build-tsan/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sanitize=0
if [[ "${1:-}" == "--sanitize" ]]; then sanitize=1; shift; fi
tsan=0
if [[ "${1:-}" == "--tsan" ]]; then tsan=1; shift; fi
default_dir=build
[[ $sanitize == 1 ]] && default_dir=build-sanitize
[[ $tsan == 1 ]] && default_dir=build-tsan
dir=${1:-$root/$default_dir}
if [[ ! -f "$dir/build.ninja" ]]; then
  args=(--buildtype=release)
  # Sanitized builds leave out the PyTorch extension: Python cannot load an ASan module.
  [[ $sanitize == 1 ]] && args=(--buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false -Dtorch=disabled)
  # ThreadSanitizer: the same, and without the dpdk and verbs drivers, whose
  # libraries (EAL threads, rdma-core) are not instrumented, so TSan would
  # report their synchronisation as races; their suites are not run under it.
  [[ $tsan == 1 ]] && args=(--buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false -Dtorch=disabled
                            -Ddpdk=disabled -Dverbs=disabled)
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

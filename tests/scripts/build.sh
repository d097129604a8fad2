#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures (once) and builds grex.   build.sh [--sanitize | --tsan | --coverage | --debug | --debugoptimized] [BUILD_DIR]
# --debug and --debugoptimized are those Meson build types, in build-debug/ and build-debugoptimized/
# (every build type must pass its own tests: run-tests.sh takes the same flags).
# --sanitize builds with AddressSanitizer + UndefinedBehaviorSanitizer in build-sanitize/.
# --tsan builds with ThreadSanitizer in build-tsan/.
# --coverage builds a debug build with gcov instrumentation (-Db_coverage=true) in build-coverage/.
# GREX_TORCH_PYTHON (run-tests.sh sets it from tests/scripts/venv.sh) names the interpreter whose
# torch the PyTorch backend builds against (-Dtorch_python), also in an existing build directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=release
case "${1:-}" in
  --sanitize | --tsan | --coverage | --debug | --debugoptimized) mode=${1#--}; shift ;;
esac
case $mode in
  release) default_dir=build ;;
  sanitize) default_dir=build-sanitize ;;
  tsan) default_dir=build-tsan ;;
  coverage) default_dir=build-coverage ;;
  debug) default_dir=build-debug ;;
  debugoptimized) default_dir=build-debugoptimized ;;
esac
dir=${1:-$root/$default_dir}
if [[ ! -f "$dir/build.ninja" ]]; then
  case $mode in
    release) args=(--buildtype=release) ;;
    # Sanitized builds leave out the PyTorch extension: Python cannot load an ASan module.
    sanitize) args=(--buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false -Dtorch=disabled) ;;
    # ThreadSanitizer: the same, and without the dpdk and verbs drivers, whose
    # libraries (EAL threads, rdma-core) are not instrumented, so TSan would
    # report their synchronisation as races; their suites are not run under it.
    tsan) args=(--buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false -Dtorch=disabled
                -Ddpdk=disabled -Dverbs=disabled) ;;
    coverage) args=(--buildtype=debug -Db_coverage=true) ;;
    debug | debugoptimized) args=(--buildtype="$mode") ;;
  esac
  [[ -n ${GREX_TORCH_PYTHON:-} ]] && args+=(-Dtorch_python="$GREX_TORCH_PYTHON")
  mkdir -p "$dir"
  if ! meson setup "$dir" "$root" "${args[@]}" > "$dir/../.meson-setup-$(basename "$dir").log" 2>&1; then
    cat "$dir/../.meson-setup-$(basename "$dir").log" >&2
    exit 1
  fi
elif [[ -n ${GREX_TORCH_PYTHON:-} ]] &&
     ! grep -q "\"name\": \"torch_python\", \"value\": \"$GREX_TORCH_PYTHON\"" "$dir/meson-info/intro-buildoptions.json"; then
  meson configure "$dir" -Dtorch_python="$GREX_TORCH_PYTHON" > /dev/null
fi
if ! ninja -C "$dir" > "$dir/ninja.log" 2>&1; then
  tail -60 "$dir/ninja.log" >&2
  exit 1
fi
echo "$dir"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds, runs the whole test suite and prints one
# closing line "N passed, N failed, N skipped". This is the README's second
# command and what CI runs (.ci/run).
#   run-tests.sh [--sanitize | --coverage] [--suite NAME]...
# --coverage runs a debug build with gcov instrumentation (build-coverage/), then prints
# line and branch coverage of lib/, drivers/, congestion/ and apps/ (gcovr).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sanitize=()
coverage=()
suites=()
while (($#)); do
  case "$1" in
    --sanitize) sanitize=(--sanitize) ;;
    --coverage) coverage=(--coverage) ;;
    --suite) suites+=(--suite "$2"); shift ;;
    *) echo "usage: run-tests.sh [--sanitize | --coverage] [--suite NAME]..." >&2; exit 2 ;;
  esac
  shift
done
bash "$root/tests/scripts/install-deps.sh" "${coverage[@]}"
start=$(date +%s)
dir=$(bash "$root/tests/scripts/build.sh" "${sanitize[@]}" "${coverage[@]}")
# Counters from an earlier run would add up with this one's.
if ((${#coverage[@]})); then find "$dir" -name '*.gcda' -delete; fi
echo "run-tests: built in $(( $(date +%s) - start )) s ($dir)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
# UndefinedBehaviorSanitizer only prints by default: make a finding fail its test.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
set +e
meson test -C "$dir" --print-errorlogs --num-processes 1 "${suites[@]}" > "$dir/meson-test.out" 2>&1
rc=$?
set -e
grep -E "^ *[0-9]+/[0-9]+ " "$dir/meson-test.out" || true
if ((rc != 0)); then
  sed -n '/^Summary of Failures/,$p' "$dir/meson-test.out" | head -40
  grep -B2 -A30 "stdout:\|stderr:" "$dir/meson-test.out" | tail -120 || true
fi
echo "run-tests: finished in $(( $(date +%s) - start )) s"
if ((${#coverage[@]})); then python3 "$root/tests/scripts/coverage.py" "$root" "$dir"; fi
python3 "$root/tests/scripts/summarize.py" "$dir"

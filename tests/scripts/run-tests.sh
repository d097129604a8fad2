#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds, runs the whole test suite and prints one
# closing line "N passed, N failed, N skipped". This is the README's second
# command and what CI runs (.ci/run).
#   run-tests.sh [--sanitize] [--tsan] [--suite NAME]...
# --tsan: ThreadSanitizer build (build-tsan/); runs the unit, shm and
# collectives suites unless --suite names others; a report fails its test.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sanitize=()
suites=()
while (($#)); do
  case "$1" in
    --sanitize) sanitize=(--sanitize) ;;
    --tsan) sanitize=(--tsan) ;;
    --suite) suites+=(--suite "$2"); shift ;;
    *) echo "usage: run-tests.sh [--sanitize] [--tsan] [--suite NAME]..." >&2; exit 2 ;;
  esac
  shift
done
bash "$root/tests/scripts/install-deps.sh"
start=$(date +%s)
dir=$(bash "$root/tests/scripts/build.sh" "${sanitize[@]}")
echo "run-tests: built in $(( $(date +%s) - start )) s ($dir)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
# UndefinedBehaviorSanitizer only prints by default: make a finding fail its test.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
timeouts=()
if [[ "${sanitize[*]}" == --tsan ]]; then
  # A ThreadSanitizer report ends the process (exit 66), so it fails its test;
  # suppressions (third-party code only, each with its reason) in tsan.supp.
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/scripts/tsan.supp}
  ((${#suites[@]})) || suites=(--suite unit --suite shm --suite collectives --no-suite dpdk --no-suite verbs)
  timeouts=(--timeout-multiplier 5)  # instrumented loads and stores run 5-15x slower (the reduce kernels' tests)
fi
set +e
meson test -C "$dir" --print-errorlogs --num-processes 1 "${timeouts[@]}" "${suites[@]}" > "$dir/meson-test.out" 2>&1
rc=$?
set -e
grep -E "^ *[0-9]+/[0-9]+ " "$dir/meson-test.out" || true
if ((rc != 0)); then
  sed -n '/^Summary of Failures/,$p' "$dir/meson-test.out" | head -40
  grep -B2 -A30 "stdout:\|stderr:" "$dir/meson-test.out" | tail -120 || true
fi
echo "run-tests: finished in $(( $(date +%s) - start )) s"
python3 "$root/tests/scripts/summarize.py" "$dir"

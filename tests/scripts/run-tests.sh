#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds, runs the whole test suite and prints one
# closing line "N passed, N failed, N skipped". This is the README's second
# command and what CI runs (.ci/run). Each test's line is printed as it ends.
#   run-tests.sh [--sanitize | --tsan | --coverage | --debug | --debugoptimized] [--suite NAME]...
# --tsan: ThreadSanitizer build (build-tsan/); runs the unit, shm and
# collectives suites unless --suite names others; a report fails its test.
# --coverage runs a debug build with gcov instrumentation (build-coverage/), then prints
# line and branch coverage of lib/, drivers/, congestion/ and apps/ (gcovr).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=()
suites=()
usage="usage: run-tests.sh [--sanitize | --tsan | --coverage | --debug | --debugoptimized] [--suite NAME]..."
while (($#)); do
  case "$1" in
    --sanitize | --tsan | --coverage | --debug | --debugoptimized)
      ((${#mode[@]} == 0)) || { echo "$usage" >&2; exit 2; }
      mode=("$1") ;;
    --suite) suites+=(--suite "$2"); shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
coverage=()
[[ "${mode[*]}" == --coverage ]] && coverage=(--coverage)
bash "$root/tests/scripts/install-deps.sh" "${coverage[@]}"
# torch 2, pytest and meson-python for the PyTorch backend's suite (created once, then reused).
# GREX_NO_VENV=1 leaves it out (the suite torch then skips with its reason).
if [[ ${GREX_NO_VENV:-0} != 1 ]]; then
  GREX_TORCH_PYTHON=$(bash "$root/tests/scripts/venv.sh")
  export GREX_TORCH_PYTHON
fi
start=$(date +%s)
echo "run-tests: building (the first build takes a few minutes on 2 cores)"
dir=$(bash "$root/tests/scripts/build.sh" "${mode[@]}")
# Counters from an earlier run would add up with this one's.
if ((${#coverage[@]})); then find "$dir" -name '*.gcda' -delete; fi
echo "run-tests: built in $(( $(date +%s) - start )) s ($dir)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
# UndefinedBehaviorSanitizer only prints by default: make a finding fail its test.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
timeouts=()
if [[ "${mode[*]}" == --tsan ]]; then
  # A ThreadSanitizer report ends the process (exit 66), so it fails its test;
  # suppressions (third-party code only, each with its reason) in tsan.supp.
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/scripts/tsan.supp}
  ((${#suites[@]})) || suites=(--suite unit --suite shm --suite collectives --no-suite dpdk --no-suite verbs)
  timeouts=(--timeout-multiplier 5)  # instrumented loads and stores run 5-15x slower (the reduce kernels' tests)
fi
total=$(meson test -C "$dir" --list "${suites[@]}" 2>/dev/null | grep -c " / " || true)
echo "run-tests: running ${total} meson tests, one line each as it ends (full log: $dir/meson-test.out)"
set +e
meson test -C "$dir" --print-errorlogs --num-processes 1 "${timeouts[@]}" "${suites[@]}" > "$dir/meson-test.out" 2>&1 &
pid=$!
# Progress: each test's result line, as meson writes it. tail stops when meson
# exits, possibly before it read the last lines: those are printed after.
line='^ *[0-9]+/[0-9]+ '
tail -n +1 --pid="$pid" -f "$dir/meson-test.out" 2>/dev/null | grep --line-buffered -E "$line" |
  tee "$dir/progress.out"
wait "$pid"
rc=$?
grep -E "$line" "$dir/meson-test.out" | tail -n +"$(( $(wc -l < "$dir/progress.out") + 1 ))" || true
set -e
if ((rc != 0)); then
  sed -n '/^Summary of Failures/,$p' "$dir/meson-test.out" | head -40
  grep -B2 -A30 "stdout:\|stderr:" "$dir/meson-test.out" | tail -120 || true
fi
echo "run-tests: finished in $(( $(date +%s) - start )) s"
if ((${#coverage[@]})); then python3 "$root/tests/scripts/coverage.py" "$root" "$dir"; fi
python3 "$root/tests/scripts/summarize.py" "$dir"

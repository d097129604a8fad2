#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The flight recorder's cost (issue 30), measured inside each process by
# bench/recorder_inproc (the recorder on and off in alternating blocks of
# one communicator: 8-byte float32 allreduces, 2 ranks over shm), over
# PROCS processes: each prints the median of its ROUNDS per-round on/off
# ratios; this prints every process's ratio and, per library, the median
# with min-max over the processes.
# AGAINST=DIR also runs, alternating process by process, the libgrex.so.0 in
# DIR (an older build's: LD_LIBRARY_PATH) under the same binary, which needs
# Communicator::set_recording.
#   PROCS=9 ROUNDS=4000 [AGAINST=DIR] bash bench/recorder_inproc.sh [build-dir]
set -euo pipefail
B=${1:-build}
PROCS=${PROCS:-9}
ROUNDS=${ROUNDS:-4000}
AGAINST=${AGAINST:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
libs=(this)
[[ -n $AGAINST ]] && libs+=("$AGAINST")
for i in $(seq 1 "$PROCS"); do
  for lib in "${libs[@]}"; do
    envs=(GREX_LOG_LEVEL=error)
    if [[ $lib != this ]]; then envs+=("LD_LIBRARY_PATH=$lib"); fi
    ratio=$(env "${envs[@]}" "$B/apps/grex-run/grex-run" -n 2 --no-tag-output -- \
      "$B/bench/recorder_inproc" "$ROUNDS" 1000 | awk '$1 == "on/off" { print $2 }')
    [[ -n $ratio ]] || { echo "recorder_inproc.sh: no ratio from $lib" >&2; exit 1; }
    echo "$i $lib $ratio" | tee -a "$out"
  done
done
for lib in "${libs[@]}"; do
  awk -v l="$lib" '$2 == l { print $3 }' "$out" | sort -g |
    awk -v l="$lib" '{ a[NR] = $1 } END { printf "%s: on/off %.4f (%.4f-%.4f) over %d processes\n", l, a[int((NR + 1) / 2)], a[1], a[NR], NR }'
done

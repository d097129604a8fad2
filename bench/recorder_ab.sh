#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The flight recorder's cost (issue 30): an 8-byte float32 allreduce at 2 ranks
# over shm, the recorder and job status on (GREX_TRACE_ENTRIES=2000, the
# default) and off (0), alternating, ROUNDS rounds. Prints each round's
# out-of-place times and their ratio, then the medians with min-max.
#   ROUNDS=15 bash bench/recorder_ab.sh [build-dir]
set -euo pipefail
B=${1:-build}
ROUNDS=${ROUNDS:-15}
ITERS=${ITERS:-1000000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
one() {  # $1: trace entries; prints the out-of-place time in µs
  rm -f "$out/r.json"
  GREX_TRACE_ENTRIES=$1 "$B/apps/grex-run/grex-run" -n 2 -- "$B/apps/grex-perf/grex-perf" allreduce -b 8 -e 8 \
    -n "$ITERS" -w 20000 -c 0 --json "$out/r.json" > "$out/log" 2>&1 || { cat "$out/log" >&2; exit 1; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rows'][0]['time_us'])" "$out/r.json"
}
printf '%-6s %-10s %-10s %s\n' round on_us off_us on/off
for i in $(seq 1 "$ROUNDS"); do
  on=$(one 2000)
  off=$(one 0)
  printf '%-6s %-10.4f %-10.4f %.4f\n' "$i" "$on" "$off" "$(python3 -c "print($on/$off)")"
done | tee "$out/rows"
python3 - "$out/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0] != "round"]
for k, name in ((1, "on"), (2, "off"), (3, "ratio")):
    v = sorted(float(r[k]) for r in rows)
    print(f"{name:>6}: median {statistics.median(v):.4f} (min {v[0]:.4f}, max {v[-1]:.4f})")
PY

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The flight recorder's cost (issue 30): an 8-byte float32 allreduce at 2 ranks
# over shm, the recorder and job status on (GREX_TRACE_ENTRIES=2000, the
# default) and off (0), alternating, ROUNDS rounds. Prints each round's
# out-of-place times and their ratio, then the medians with min-max.
# AGAINST=DIR also runs both, in the same rounds, with the libgrex.so.0 in DIR
# (an older build's, say) ahead of this build's (LD_LIBRARY_PATH), and prints
# its columns and ratio after this build's.
#   ROUNDS=15 [AGAINST=DIR] bash bench/recorder_ab.sh [build-dir]
set -euo pipefail
B=${1:-build}
ROUNDS=${ROUNDS:-15}
ITERS=${ITERS:-1000000}
AGAINST=${AGAINST:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
one() {  # $1: trace entries, $2: a library directory or ""; prints the out-of-place time in µs
  rm -f "$out/r.json"
  env ${2:+LD_LIBRARY_PATH=$2} GREX_TRACE_ENTRIES=$1 "$B/apps/grex-run/grex-run" -n 2 -- \
    "$B/apps/grex-perf/grex-perf" allreduce -b 8 -e 8 -n "$ITERS" -w 20000 -c 0 --json "$out/r.json" \
    > "$out/log" 2>&1 || { cat "$out/log" >&2; exit 1; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rows'][0]['time_us'])" "$out/r.json"
}
ratio() { python3 -c "print(f'{$1/$2:.4f}')"; }
if [[ -n $AGAINST ]]; then
  printf '%-6s %-10s %-10s %-8s %-10s %-10s %s\n' round on_us off_us on/off other_on other_off other_on/off
else
  printf '%-6s %-10s %-10s %s\n' round on_us off_us on/off
fi
for i in $(seq 1 "$ROUNDS"); do
  on=$(one 2000 "")
  off=$(one 0 "")
  if [[ -n $AGAINST ]]; then
    aon=$(one 2000 "$AGAINST")
    aoff=$(one 0 "$AGAINST")
    printf '%-6s %-10.4f %-10.4f %-8s %-10.4f %-10.4f %s\n' "$i" "$on" "$off" "$(ratio "$on" "$off")" "$aon" "$aoff" \
      "$(ratio "$aon" "$aoff")"
  else
    printf '%-6s %-10.4f %-10.4f %s\n' "$i" "$on" "$off" "$(ratio "$on" "$off")"
  fi
done | tee "$out/rows"
python3 - "$out/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0] != "round"]
names = ["on", "off", "ratio", "other on", "other off", "other ratio"]
for k in range(1, len(rows[0])):
    v = sorted(float(r[k]) for r in rows)
    print(f"{names[k - 1]:>11}: median {statistics.median(v):.4f} (min {v[0]:.4f}, max {v[-1]:.4f})")
PY

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two grex builds side by side: float-sum allreduce over shm, one host, the builds
# alternating run by run (A B, then B A, ...) so both see the same machine load. For a
# change that must keep its speed (a restructuring), where the peers' ratios would only
# add noise.
#
# For each round and each size S (iterations from the table below) it runs, per build,
#   grex-run -n N --no-tag-output -- grex-perf allreduce -b S -e S -n I -w W -d float -o sum -c 0
# (out of place and in place, buffers from malloc; ALLOC=1 adds --alloc: Communicator::alloc
# memory) and keeps grex-perf's time per call, the slowest rank's average.
# It prints per size and mode the median and min-max of each build and the median of the
# B/A ratios taken round by round. The binaries (and libgrex.so where the tools link it) are
# copied first, so a rebuild during the run cannot mix versions.
#
# Usage: bench/ab_allreduce.sh BUILD_A BUILD_B
# Env:   RANKS (2), SIZES ("8 4K 256K 4M 64M"), REPEAT (5), ALLOC (0),
#        OUT (directory for raw.tsv; default a new /tmp/ab_allreduce.*)
set -euo pipefail

(($# == 2)) || { sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RANKS=${RANKS:-2}
SIZES=${SIZES:-"8 4K 256K 4M 64M"}
REPEAT=${REPEAT:-5}
ALLOC=${ALLOC:-0}
OUT=${OUT:-$(mktemp -d /tmp/ab_allreduce.XXXXXX)}
mkdir -p "$OUT"

snap() {  # snap LABEL BUILD
  local dir=$OUT/$1 build=$2
  [[ $build = /* ]] || build=$ROOT/$build
  mkdir -p "$dir"
  cp -p "$build/apps/grex-run/grex-run" "$build/apps/grex-perf/grex-perf" "$dir/" ||
    { echo "ab_allreduce.sh: no grex-run / grex-perf in $build" >&2; exit 1; }
  # Tools linked against libgrex.so find the copy through LD_LIBRARY_PATH (run_one).
  cp -pP "$build"/libgrex.so* "$dir/" 2>/dev/null || true
  echo "$1: $build ($(git -C "$build/.." rev-parse --short HEAD 2>/dev/null || echo '?'))"
}
snap A "$1"
snap B "$2"

iters() {  # iterations and warmup per size: about a second per run
  local b
  b=$(numfmt --from=iec "$1")
  if ((b <= 64 * 1024)); then echo "20000 1000"
  elif ((b <= 1024 * 1024)); then echo "1000 100"
  elif ((b <= 16 * 1024 * 1024)); then echo "100 10"
  else echo "10 2"; fi
}

run_one() {  # run_one LABEL SIZE -> "oop inplace" (us) or "NA NA"
  local dir=$OUT/$1 size=$2 n w args=()
  read -r n w <<<"$(iters "$size")"
  ((ALLOC)) && args+=(--alloc)
  LD_LIBRARY_PATH=$dir timeout 300 "$dir/grex-run" -n "$RANKS" --no-tag-output -- "$dir/grex-perf" allreduce -b "$size" -e "$size" \
    -n "$n" -w "$w" -d float -o sum -c 0 "${args[@]}" 2>/dev/null |
    awk '$1 ~ /^[0-9]+$/ { print $5, $9; found = 1 } END { if (!found) print "NA NA" }'
}

printf 'round\tsize\tbuild\toop_us\tinplace_us\n' >"$OUT/raw.tsv"
for ((r = 0; r < REPEAT; ++r)); do
  for size in $SIZES; do
    order=(A B)
    ((r % 2)) && order=(B A)
    for b in "${order[@]}"; do
      read -r oop inp <<<"$(run_one "$b" "$size")"
      printf '%d\t%s\t%s\t%s\t%s\n' "$r" "$size" "$b" "$oop" "$inp" >>"$OUT/raw.tsv"
    done
  done
  echo "round $((r + 1))/$REPEAT done" >&2
done

python3 - "$OUT/raw.tsv" "$RANKS" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
sizes = list(dict.fromkeys(r['size'] for r in rows))
print(f"{sys.argv[2]} ranks, time per call (us): median (min-max) of each build; B/A: median of the per-round ratios")
print("| size | mode | A | B | B/A |")
print("|---:|---|---:|---:|---:|")
for s in sizes:
    for mode, key in (("out of place", "oop_us"), ("in place", "inplace_us")):
        t = {b: {r['round']: float(r[key]) for r in rows if r['size'] == s and r['build'] == b and r[key] != 'NA'}
             for b in "AB"}
        cell = lambda v: f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "NA"
        ratios = [t['B'][k] / t['A'][k] for k in t['A'] if k in t['B'] and t['A'][k] > 0]
        rr = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "NA"
        print(f"| {s} | {mode} | {cell(list(t['A'].values()))} | {cell(list(t['B'].values()))} | {rr} |")
EOF
echo "raw: $OUT/raw.tsv"

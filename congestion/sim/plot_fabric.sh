#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The leaf-spine fabric's plots (issue 31; docs/congestion.md, "Leaf-spine fabric"):
#   fabric_spine_failure.png  delivered goodput and the largest port queue per 50 us, a
#                             long-lived ring on 4 x 4 x 4 at 100 Gbit/s, spine 1 failing at
#                             2 ms: RTTCC on one path, sprayed over 64 entropies under one
#                             controller and under one per path, DCQCN + ECN sprayed
#   fabric_completion.png     completion of a 16 MB ring and a 1 MB-a-pair alltoall under
#                             each scheme (the runs of run_fabric.sh's first tables)
# Needs gnuplot (install-deps.sh installs gnuplot-nox). Takes about 15 s.
# Usage: BUILD_DIR=build bash congestion/sim/plot_fabric.sh [OUT_DIR]    (default docs/img)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-build}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
SIM=$BUILD_DIR/congestion/sim/grex-ccsim
OUT=${1:-$ROOT/docs/img}
command -v gnuplot >/dev/null || { echo "plot_fabric.sh: needs gnuplot" >&2; exit 1; }
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fabric=(--topology leaf-spine --leaves 4 --spines 4 --hosts-per-leaf 4 --host-gbps 100 --spine-gbps 100)

# name | flags (the labels of the completion plot are below)
variants=("rttcc-1|--cc rttcc --paths 1"
  "rttcc-sprayed|--cc rttcc --paths 64"
  "rttcc-per-path|--cc rttcc --paths 64 --path-cc"
  "credits|--cc none --credits --paths 64"
  "dcqcn-1|--cc dcqcn --ecn --paths 1"
  "dcqcn-sprayed|--cc dcqcn --ecn --paths 64")
declare -A label=([rttcc-1]="RTTCC, one path" [rttcc-sprayed]="RTTCC sprayed"
  [rttcc-per-path]="RTTCC per path" [credits]="credits sprayed" [dcqcn-1]="DCQCN + ECN, one path"
  [dcqcn-sprayed]="DCQCN + ECN sprayed")

for v in rttcc-1 rttcc-sprayed rttcc-per-path dcqcn-sprayed; do
  for s in "${variants[@]}"; do
    [[ ${s%%|*} == "$v" ]] || continue
    # shellcheck disable=SC2086  # the variant's flags split on purpose
    "$SIM" "${fabric[@]}" ${s#*|} --pattern ring --duration-ms 10 --warmup-ms 0.5 --fail-spine 1 --fail-at-ms 2 \
      --csv "$tmp/$v.csv" --json "$tmp/$v.json" > /dev/null
  done
done

: > "$tmp/completion.dat"
for s in "${variants[@]}"; do
  v=${s%%|*}
  row="\"${label[$v]}\""
  for p in "ring 16000" "alltoall 1000"; do
    # shellcheck disable=SC2086
    "$SIM" "${fabric[@]}" ${s#*|} --pattern ${p% *} --flow-kb ${p#* } --duration-ms 100 --json "$tmp/r.json" > /dev/null
    row+=" $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['completion_ms'] if d['flows_done'] == d['flows'] else 100)" "$tmp/r.json")"
  done
  echo "$row" >> "$tmp/completion.dat"
done
cat "$tmp/completion.dat"

gnuplot <<EOF
set terminal pngcairo size 1000,720 font ",11"
set output "$OUT/fabric_spine_failure.png"
set datafile separator ","
set multiplot layout 2,1 title "Long-lived ring, 4 leaves x 4 spines x 4 hosts at 100 Gbit/s; spine 1 fails at 2 ms"
set grid
set key bottom right
set ylabel "goodput per 50 us (Gbit/s)"
set yrange [0:1700]
set xrange [0:10]
plot "$tmp/rttcc-1.csv" every ::1 using (\$1/1000):2 with lines lw 2 title "RTTCC, one path (ECMP)", \
     "$tmp/rttcc-sprayed.csv" every ::1 using (\$1/1000):2 with lines lw 2 title "RTTCC sprayed, one controller", \
     "$tmp/rttcc-per-path.csv" every ::1 using (\$1/1000):2 with lines lw 2 title "RTTCC sprayed, a controller per path", \
     "$tmp/dcqcn-sprayed.csv" every ::1 using (\$1/1000):2 with lines lw 2 title "DCQCN + ECN sprayed", \
     1181 with lines dt 2 lc rgb "gray" title "three spines' capacity (payload)"
set key top right
set xlabel "time (ms)"
set ylabel "largest port queue (KB)"
set yrange [0:*]
plot "$tmp/rttcc-1.csv" every ::1 using (\$1/1000):3 with lines lw 1 title "RTTCC, one path", \
     "$tmp/rttcc-sprayed.csv" every ::1 using (\$1/1000):3 with lines lw 1 title "RTTCC sprayed", \
     "$tmp/rttcc-per-path.csv" every ::1 using (\$1/1000):3 with lines lw 1 title "RTTCC per path", \
     "$tmp/dcqcn-sprayed.csv" every ::1 using (\$1/1000):3 with lines lw 1 title "DCQCN sprayed"
unset multiplot
EOF

gnuplot <<EOF
set terminal pngcairo size 1000,520 font ",11"
set output "$OUT/fabric_completion.png"
set title "Completion time, 4 x 4 x 4 at 100 Gbit/s (sprayed: 64 entropies)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid y
set ylabel "completion (ms)"
set yrange [0:*]
set xtics rotate by -20
set key top left
plot "$tmp/completion.dat" using 2:xtic(1) title "ring, 16 MB a flow", \
     "" using 3 title "alltoall, 1 MB a pair"
EOF
echo "plot_fabric.sh: $OUT/fabric_spine_failure.png, $OUT/fabric_completion.png" >&2

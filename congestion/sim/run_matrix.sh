#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Incast sweep with grex-ccsim: RTTCC (no ECN) against DCQCN (with ECN) for
# a range of flow counts, lossless, one JSON (and CSV time series) per run,
# a markdown table on stdout (also table.md) and gnuplot PNGs.
#
# Environment:
#   NS           flow counts (default "2 8 32 128 256 1024 4096 16384")
#   DURATION_MS  simulated time per run (default 100)
#   GBPS         line rate (default 100)
#   OUT          output directory (default: a new ccsim.XXXX under $TMPDIR or /tmp)
#   JOBS         simulations run in parallel (default 1)
#   PLOT_N       the N whose queue-over-time is plotted (default 256, if swept)
#   WARMUP_MS    start of the measurement window (default: grex-ccsim's, 10 % of the run)
#   CCSIM        the grex-ccsim binary (default BUILD_DIR/congestion/sim/grex-ccsim,
#                BUILD_DIR relative to the repository root, default "build")
#   EXTRA        more grex-ccsim options for every run (e.g. "--seed 2")
#
# OUT/commands.sh holds the exact commands run; OUT/summary.dat the table's numbers.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
NS=${NS:-"2 8 32 128 256 1024 4096 16384"}
DURATION_MS=${DURATION_MS:-100}
GBPS=${GBPS:-100}
JOBS=${JOBS:-1}
PLOT_N=${PLOT_N:-256}
EXTRA=${EXTRA:-}
WARMUP_MS=${WARMUP_MS:-}
CCSIM=${CCSIM:-$root/${BUILD_DIR:-build}/congestion/sim/grex-ccsim}
OUT=${OUT:-$(mktemp -d -t ccsim.XXXX)}

die() { echo "run_matrix.sh: $*" >&2; exit 1; }
[[ -x $CCSIM ]] || die "no grex-ccsim at $CCSIM (build it, or set CCSIM or BUILD_DIR)"
command -v jq >/dev/null || die "needs jq"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "JOBS must be a positive integer"
mkdir -p "$OUT"

# name:options of the two algorithms compared
algos=("rttcc:" "dcqcn:--ecn")

cmds=$OUT/commands.sh
{
  echo "#!/usr/bin/env bash"
  echo "# grex-ccsim runs of run_matrix.sh ($(date -u +%Y-%m-%dT%H:%M:%SZ)); one per line, independent."
} >"$cmds"
# Largest N first: with JOBS > 1 the long runs start early.
for n in $(tr ' ' '\n' <<<"$NS" | sort -rn); do
  for a in "${algos[@]}"; do
    name=${a%%:*} opts=${a#*:}
    base=$OUT/$name-$n
    warm=()
    [[ -z $WARMUP_MS ]] || warm=(--warmup-ms "$WARMUP_MS")
    # shellcheck disable=SC2086  # opts and EXTRA are word lists on purpose
    printf '%q ' "$CCSIM" --cc "$name" $opts --flows "$n" --duration-ms "$DURATION_MS" --gbps "$GBPS" \
      "${warm[@]}" $EXTRA --json "$base.json" --csv "$base.csv" >>"$cmds"
    printf '> %q 2>&1\n' "$base.log" >>"$cmds"
  done
done
chmod +x "$cmds"

echo "run_matrix.sh: $(($(wc -l <"$cmds") - 2)) runs, $JOBS at a time, into $OUT" >&2
status=0
grep -v '^#' "$cmds" | xargs -d '\n' -P "$JOBS" -I{} bash -c '{}' || status=$?
((status == 0)) || echo "run_matrix.sh: some runs failed (see $OUT/*.log)" >&2

# One row per N: the measurement window's numbers (after the warmup).
get() {  # file jq-expression
  if [[ -s $1 ]]; then jq -r "$2" "$1"; else echo nan; fi
}
dat=$OUT/summary.dat
echo "# N rttcc_goodput rttcc_p99_queue_us rttcc_jain rttcc_probe_overhead dcqcn_goodput dcqcn_p99_queue_us dcqcn_jain rttcc_wall_s dcqcn_wall_s" >"$dat"
table=$OUT/table.md
{
  echo "Incast at ${GBPS} Gbit/s, ${DURATION_MS} ms, lossless; metrics over [warmup, end], warmup ${WARMUP_MS:-10 % of the run}${WARMUP_MS:+ ms}."
  echo "Goodput is of the payload a saturated link carries; p99 queue is the switch queueing delay."
  echo
  echo "| N | RTTCC goodput | RTTCC p99 queue (us) | RTTCC Jain | RTTCC probe overhead | DCQCN goodput | DCQCN p99 queue (us) | DCQCN Jain | RTTCC/DCQCN goodput |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$table"
for n in $NS; do
  r=$OUT/rttcc-$n.json d=$OUT/dcqcn-$n.json
  rg=$(get "$r" .window.goodput) rq=$(get "$r" .window.queue_delay_us.p99) rj=$(get "$r" .window.jain)
  rp=$(get "$r" .window.probe_overhead) rw=$(get "$r" .wall_seconds)
  dg=$(get "$d" .window.goodput) dq=$(get "$d" .window.queue_delay_us.p99) dj=$(get "$d" .window.jain)
  dw=$(get "$d" .wall_seconds)
  echo "$n $rg $rq $rj $rp $dg $dq $dj $rw $dw" >>"$dat"
  awk -v n="$n" -v rg="$rg" -v rq="$rq" -v rj="$rj" -v rp="$rp" -v dg="$dg" -v dq="$dq" -v dj="$dj" 'BEGIN {
    ratio = (dg + 0 > 0) ? sprintf("%.3f", rg / dg) : "n/a"
    printf("| %d | %.4f | %.2f | %.4f | %.4f | %.4f | %.2f | %.4f | %s |\n", n, rg, rq, rj, rp, dg, dq, dj, ratio)
  }' >>"$table"
done
cat "$table"

if ! command -v gnuplot >/dev/null; then
  echo "run_matrix.sh: no gnuplot, no plots" >&2
  exit "$status"
fi
gnuplot <<EOF
set terminal pngcairo size 900,560 font ",11"
set logscale x 2
set grid
set key bottom left
set xlabel "flows (N)"
set output "$OUT/goodput_vs_n.png"
set title "Goodput vs incast degree (${GBPS} Gbit/s, lossless)"
set ylabel "goodput (fraction of a saturated link)"
set yrange [0:1.05]
plot "$dat" using 1:2 with linespoints lw 2 title "RTTCC", \
     "$dat" using 1:6 with linespoints lw 2 title "DCQCN + ECN"
set output "$OUT/p99_queue_vs_n.png"
set title "p99 switch queueing delay vs incast degree"
set ylabel "p99 queueing delay (us)"
set autoscale y
set logscale y 10
set key top left
plot "$dat" using 1:3 with linespoints lw 2 title "RTTCC", \
     "$dat" using 1:7 with linespoints lw 2 title "DCQCN + ECN"
EOF
if [[ -s $OUT/rttcc-$PLOT_N.csv && -s $OUT/dcqcn-$PLOT_N.csv ]]; then
  gnuplot <<EOF
set terminal pngcairo size 1000,560 font ",11"
set datafile separator ","
set grid
set output "$OUT/queue_time_n$PLOT_N.png"
set title "Switch queue over time, N = $PLOT_N"
set xlabel "time (ms)"
set ylabel "queue + 1 KB (log scale)"
set logscale y 10
set yrange [1:*]
plot "$OUT/rttcc-$PLOT_N.csv" every ::1 using (\$1/1000):(\$2/1000 + 1) with lines lw 1 title "RTTCC", \
     "$OUT/dcqcn-$PLOT_N.csv" every ::1 using (\$1/1000):(\$2/1000 + 1) with lines lw 1 title "DCQCN + ECN"
EOF
fi
echo "run_matrix.sh: plots and table in $OUT" >&2
exit "$status"

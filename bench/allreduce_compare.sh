#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex vs Open MPI 4.1 vs Gloo: float-sum allreduce on one host, 2 and 4 ranks, 8 B to
# 256 MiB, all run alternately in the same invocation so they see the same machine load.
#
# For each rank count N, each of REPEAT rounds and each size S (iterations I, warmup W
# from the table below), it runs one process group per implementation:
#
#   grex       $BUILD/apps/grex-run/grex-run -n N --no-tag-output -- \
#                $BUILD/apps/grex-perf/grex-perf allreduce -b S -e S -n I -w W -d float -o sum -c 1 --inplace 0
#              (buffers from malloc, as a trainer's tensors)
#   grex alloc the same with --alloc: buffers from Communicator::alloc (shared memory the peers
#              map, as MPI_Alloc_mem or ncclMemAlloc memory)
#   Open MPI   mpirun -np N --oversubscribe --bind-to none $PEER_BUILD/bench/mpi_allreduce -n I -w W S
#              (defaults otherwise: vader shared memory with CMA single copy, tuned collectives)
#   Gloo ring  $PEER_BUILD/bench/gloo_allreduce -np N --algo ring -n I -w W S
#              (gloo::allreduce, the options API PyTorch uses; tcp transport on 127.0.0.1)
#   Gloo HD    $PEER_BUILD/bench/gloo_allreduce -np N --algo halving_doubling -n I -w W S
#              (gloo::AllreduceHalvingDoubling, tcp on 127.0.0.1)
#
# The order of the five rotates from round to round. Every number is the slowest rank's
# average time per call; the tables give the median over the rounds. grex, Open MPI and
# Gloo ring run out of place, Gloo HD in place (the legacy class has no other form).
# Each size and each implementation gets its own processes (Gloo's send-buffer sizing
# follows the first messages it sends; PEERS-NOTES.md).
#
# The memory-bandwidth bound comes from bench/membw (one core, 256 MiB buffers, best of 5),
# measured at the start, middle and end of the run; the best of the three is used:
#   R_copy = memcpy bytes copied per second, R_add = c = a + b bytes of c per second.
# A ring allreduce makes each rank reduce (N-1)/N * S bytes (at best one c = a + b pass,
# reading the peer's data in place) and copy (N-1)/N * S bytes, so with one core per rank
#   busbw = 2(N-1)/N * S / t  <=  2 / (1/R_add + 1/R_copy) * min(1, cores / N).
#
# grex's binaries are copied to a private directory just before the first measurement, so a
# rebuild of $BUILD during the run cannot mix versions. The peers' programs are built in $PEER_BUILD (its own meson dir;
# set up here if missing); $BUILD is never built.
#
# Usage: bench/allreduce_compare.sh
# Env:   REPEAT (3), RANKS ("2 4"), SIZES (a subset such as "8 1M 256M"; default all),
#        BUILD (build), PEER_BUILD (build-cmp),
#        OUT (directory for raw.tsv, membw.tsv and logs; default a new /tmp/allreduce_compare.*),
#        PLOT (PNG path, default $OUT/allreduce.png; needs gnuplot),
#        TIMEOUT_S (per run, 600), QUIET_LOAD (e.g. 1.0: first wait until the 1-minute load
#        average is below it and the CPUs were less than 10 % busy over 5 s, polling every
#        30 s for up to QUIET_WAIT_S, default 900), MAX_OTHER (0.15) and RETRIES (3): below.
# raw.tsv has one line per run: ranks, size, implementation, round, time (us) or NA, start
# (epoch s), "other": the share of the machine's CPU time that went to anything but this
# script's own processes during the run (busy ticks from /proc/stat minus the script's
# children's ticks from /proc/PID/stat, over wall time x cores; steal counts as other), and
# "kept". On a shared machine a run with other > MAX_OTHER is disturbed (spinning ranks lose
# their core): it is kept out of the medians (kept 0) and run again after waiting up to 120 s
# for the CPUs to be quiet, up to RETRIES times (and while these waits add up to less than
# RETRY_BUDGET_S, default 1800); the last try is kept whatever its load.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PEER_BUILD=${PEER_BUILD:-build-cmp}
REPEAT=${REPEAT:-3}
RANKS=${RANKS:-"2 4"}
MAX_OTHER=${MAX_OTHER:-0.15}
RETRIES=${RETRIES:-3}
RETRY_BUDGET_S=${RETRY_BUDGET_S:-1800}
WAITED=0
TIMEOUT_S=${TIMEOUT_S:-600}
OUT=${OUT:-$(mktemp -d /tmp/allreduce_compare.XXXXXX)}
mkdir -p "$OUT/logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

die() { echo "allreduce_compare.sh: $*" >&2; exit 1; }

# --- prerequisites (installs nothing; says what is missing) ---
missing=()
command -v mpirun >/dev/null || missing+=(openmpi-bin)
command -v mpicc >/dev/null || missing+=(libopenmpi-dev)
[[ -e /usr/include/gloo/allreduce.h ]] || missing+=(libgloo-dev)
command -v meson >/dev/null || missing+=(meson)
command -v ninja >/dev/null || missing+=(ninja-build)
((${#missing[@]} == 0)) || die "missing packages; run: apt-get install ${missing[*]}"
for f in "$BUILD/apps/grex-run/grex-run" "$BUILD/apps/grex-perf/grex-perf"; do
  [[ -x $f ]] || die "$f is missing; build $BUILD first (ninja -C $BUILD)"
done

# --- the peers' programs, in their own build dir ---
if [[ ! -f $PEER_BUILD/build.ninja ]]; then
  meson setup "$PEER_BUILD" -Dtests=disabled -Dtorch=disabled -Dcuda=disabled -Ddpdk=disabled \
    -Dverbs=disabled >"$OUT/logs/meson-setup.log" 2>&1 || die "meson setup $PEER_BUILD failed; see $OUT/logs/meson-setup.log"
fi
ninja -C "$PEER_BUILD" bench/mpi_allreduce bench/gloo_allreduce bench/membw >"$OUT/logs/ninja.log" 2>&1 ||
  die "building the peers in $PEER_BUILD failed; see $OUT/logs/ninja.log"
MPI_BENCH=$PEER_BUILD/bench/mpi_allreduce
GLOO_BENCH=$PEER_BUILD/bench/gloo_allreduce
MEMBW=$PEER_BUILD/bench/membw

# size label iterations warmup
CASES=(
  "8 8_B 1000 100" "64 64_B 1000 100" "512 512_B 1000 100" "4K 4_KiB 1000 100"
  "32K 32_KiB 500 50" "256K 256_KiB 200 20" "1M 1_MiB 100 10" "4M 4_MiB 50 5"
  "16M 16_MiB 20 3" "64M 64_MiB 10 2" "256M 256_MiB 5 1"
)
if [[ -n ${SIZES:-} ]]; then  # a subset, for quick checks: SIZES="8 1M 256M"
  sel=()
  for c in "${CASES[@]}"; do [[ " $SIZES " = *" ${c%% *} "* ]] && sel+=("$c"); done
  ((${#sel[@]} > 0)) || die "SIZES='$SIZES' matches none of: $(printf '%s ' "${CASES[@]%% *}")"
  CASES=("${sel[@]}")
fi
IMPLS=(grex grex_alloc ompi gloo_ring gloo_hd)

# Runs one implementation at one size; prints the time (us) or nothing.
run_one() {  # impl nranks size iters warmup logfile
  local impl=$1 n=$2 s=$3 it=$4 w=$5 log=$6
  case $impl in
    grex | grex_alloc)
      local alloc=()
      [[ $impl = grex_alloc ]] && alloc=(--alloc)
      timeout "$TIMEOUT_S" "$GREX_RUN" -n "$n" --no-tag-output -- "$GREX_PERF" allreduce -b "$s" -e "$s" \
        -n "$it" -w "$w" -d float -o sum -c 1 --inplace 0 "${alloc[@]}" 2>>"$log" | tee -a "$log" |
        awk '/^#/ && / time / { for (i = 2; i <= NF; ++i) if ($i == "time") col = i - 1 }
             /^ *[0-9]/ && col { if ($NF != "0" && $NF != "N/A") bad = 1; t = $col }
             END { if (t != "" && !bad) print t }'
      ;;
    ompi)
      timeout "$TIMEOUT_S" mpirun -np "$n" --oversubscribe --bind-to none "$MPI_BENCH" -n "$it" -w "$w" "$s" \
        2>>"$log" | tee -a "$log" | awk 'NF == 2 && /^[0-9]/ { print $2 }'
      ;;
    gloo_ring | gloo_hd)
      local algo=ring
      [[ $impl = gloo_hd ]] && algo=halving_doubling
      timeout "$TIMEOUT_S" "$GLOO_BENCH" -np "$n" --algo "$algo" -n "$it" -w "$w" "$s" 2>>"$log" |
        tee -a "$log" | awk 'NF == 2 && /^[0-9]/ { print $2 }'
      ;;
  esac
}

membw_run() {  # tag: appends "tag memcpy add" to membw.tsv
  local m
  m=$("$MEMBW" -s 256M -r 5)
  echo "$1 $(awk '$1 == "memcpy_GBps" { c = $2 } $1 == "add_GBps" { a = $2 } END { print c, a }' <<<"$m")" >>"$OUT/membw.tsv"
}

CORES=$(nproc)
HZ=$(getconf CLK_TCK)
# "machine busy ticks, this shell's reaped children's ticks"
cpu_ticks() {
  awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat | tr '\n' ' '
  sed 's/^.*) //' "/proc/$$/stat" | awk '{ print $14 + $15 }'
}

# Waits (up to $1 s) until the CPUs were less than 10 % busy over 3 s.
wait_quiet() {
  local deadline=$(($(date +%s) + $1)) a b
  while (($(date +%s) < deadline)); do
    a=$(cpu_ticks) && sleep 3 && b=$(cpu_ticks)
    awk -v a="$a" -v b="$b" -v hz="$HZ" -v cores="$CORES" 'BEGIN { split(a, x, " "); split(b, y, " ");
      exit !((y[1] - x[1]) / (3 * hz * cores) < 0.10) }' && return 0
  done
  return 0
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "NA"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: >"$OUT/raw.tsv"
: >"$OUT/membw.tsv"
# Optionally wait (polling every 30 s) until the 1-minute load average is below QUIET_LOAD.
if [[ -n ${QUIET_LOAD:-} ]]; then
  deadline=$(($(date +%s) + ${QUIET_WAIT_S:-900}))
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    a=$(cpu_ticks) && sleep 5 && b=$(cpu_ticks)
    busy=$(awk -v a="$a" -v b="$b" -v hz="$HZ" -v cores="$CORES" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.2f", (y[1] - x[1]) / (5 * hz * cores) }')
    echo "# $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg), CPU busy over 5 s $busy" >>"$OUT/load_wait.txt"
    awk -v l="$load" -v q="$QUIET_LOAD" -v b="$busy" 'BEGIN { exit !(l < q && b < 0.10) }' && break
    (($(date +%s) < deadline)) || { echo "# load still $load after ${QUIET_WAIT_S:-900} s; running anyway" >&2; break; }
    sleep 30
  done
fi
# --- a private copy of grex's binaries (and libgrex.so, which they link), taken after the
# wait so that it is the newest build, and checked to run (not caught half-linked) ---
SNAP=$OUT/grex-bin
mkdir -p "$SNAP"
cp -p "$BUILD/apps/grex-run/grex-run" "$BUILD/apps/grex-perf/grex-perf" "$SNAP/"
cp -pP "$BUILD"/libgrex.so* "$SNAP/" 2>/dev/null || true  # tools linked against libgrex.so
export LD_LIBRARY_PATH=$SNAP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
GREX_RUN=$SNAP/grex-run
GREX_PERF=$SNAP/grex-perf
"$GREX_PERF" --help >/dev/null 2>&1 && "$GREX_RUN" --help >/dev/null 2>&1 || die "the copied grex binaries do not run (a build in progress?)"
GREX_VERSION="$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- lib drivers congestion apps meson.build 2>/dev/null ||
  echo ' + uncommitted changes to the library or apps'), binaries from $BUILD built $(date -r "$GREX_PERF" '+%F %T')"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)
membw_run start
"$MEMBW" -s 256M -r 5 -t 2 | awk '$1 == "memcpy_GBps" { c = $2 } $1 == "add_GBps" { a = $2 } END { print "memcpy " c " | add " a }' >"$OUT/membw2.txt"

round=0
for n in $RANKS; do
  for ((r = 0; r < REPEAT; ++r)); do
    for c in "${CASES[@]}"; do
      read -r size label iters warmup <<<"$c"
      for ((k = 0; k < ${#IMPLS[@]}; ++k)); do
        impl=${IMPLS[$(((k + round) % ${#IMPLS[@]}))]}
        for ((attempt = 0; ; ++attempt)); do
          c0=$(cpu_ticks) w0=$(date +%s%N)
          t=$(run_one "$impl" "$n" "$size" "$iters" "$warmup" "$OUT/logs/$impl-n$n-$size-r$r.log" || true)
          c1=$(cpu_ticks) w1=$(date +%s%N)
          other=$(awk -v a="$c0" -v b="$c1" -v w0="$w0" -v w1="$w1" -v hz="$HZ" -v cores="$CORES" 'BEGIN {
            split(a, x, " "); split(b, y, " ")
            wall = (w1 - w0) / 1e9 * hz * cores
            o = ((y[1] - x[1]) - (y[2] - x[2])) / wall
            printf "%.2f", (o < 0) ? 0 : o }')
          [[ $t =~ ^[0-9.]+$ ]] || { echo "# $impl n=$n size=$size round $r failed; see $OUT/logs" >&2; t=NA; }
          disturbed=$(awk -v o="$other" -v m="$MAX_OTHER" 'BEGIN { print (o > m) ? 1 : 0 }')
          kept=1
          ((disturbed && attempt < RETRIES && WAITED < RETRY_BUDGET_S)) && kept=0
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$size" "$impl" "$r" "$t" "$((w0 / 1000000000))" "$other" "$kept" \
            >>"$OUT/raw.tsv"
          ((kept)) && break
          q0=$(date +%s)
          wait_quiet 120
          WAITED=$((WAITED + $(date +%s) - q0))
        done
      done
    done
    round=$((round + 1))
  done
  [[ $n = "${RANKS##* }" ]] || membw_run middle
done
membw_run end
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - START))

# --- report ---
read -r R_COPY R_ADD < <(awk '{ if ($2 > c) c = $2; if ($3 > a) a = $3 } END { print c, a }' "$OUT/membw.tsv")
med() { awk -v n="$1" -v s="$2" -v i="$3" -F'\t' '$1 == n && $2 == s && $3 == i && $8 == 1 && $5 != "NA" { print $5 }' "$OUT/raw.tsv" | median; }
fmt() { awk -v t="$1" 'BEGIN { if (t == "NA") print "n/a"; else if (t < 10000) printf "%.1f", t; else printf "%.0f", t }'; }
bytes_of() { awk -v s="$1" 'BEGIN { m = 1; if (s ~ /K$/) m = 1024; if (s ~ /M$/) m = 1048576; sub(/[KM]$/, "", s); printf "%.0f", s * m }'; }

echo "# allreduce, float sum, one host ($CORES cores), grex vs Open MPI vs Gloo; medians of $REPEAT alternating rounds"
echo "# grex: $GREX_VERSION"
echo "# $(mpirun --version 2>/dev/null | head -1); gloo $(dpkg-query -W -f '${Version}' libgloo-dev 2>/dev/null) (tcp, 127.0.0.1)"
[[ -s $OUT/load_wait.txt ]] && echo "# waited for 1-minute load < $QUIET_LOAD and CPU busy < 0.10: $(head -1 "$OUT/load_wait.txt" | cut -c3-) ... $(tail -1 "$OUT/load_wait.txt" | cut -c3-) ($(wc -l <"$OUT/load_wait.txt") polls)"
echo "# load before: $LOAD_BEFORE; load after (includes the last runs' own ranks): $LOAD_AFTER; $ELAPSED s; raw data and logs: $OUT"
echo "# other load (share of all cores used by anything but these runs): $(awk -F'\t' -v m="$MAX_OTHER" '
  $8 == 0 { d++ } $8 == 1 { k++; s += $7; if ($7 > mx) mx = $7; if ($7 > m) kd++ }
  END { printf "%d runs above %s re-run after a quiet wait; kept runs: mean %.2f, max %.2f, %d still above %s", d, m, s / k, mx, kd, m }' "$OUT/raw.tsv"); waited $WAITED s for quiet between tries"
echo "# goals: grex/OMPI <= 0.8 at >= 1 MiB and <= 1.0 below; grex/best Gloo <= 0.5 everywhere (met: yes/NO)"
echo "# membw (one core, 256 MiB, GB/s copied | GB/s of c): $(awk '{ printf "%s %s | %s; ", $1, $2, $3 }' "$OUT/membw.tsv")2 cores at once, per core: $(cat "$OUT/membw2.txt")"

for n in $RANKS; do
  echo
  echo "## $n ranks"
  echo
  echo "| size | grex (us) | grex alloc (us) | OMPI (us) | grex/OMPI | alloc/OMPI | Gloo ring (us) | Gloo HD (us) | grex/best Gloo |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  : >"$OUT/plot_n$n.dat"
  for c in "${CASES[@]}"; do
    read -r size label iters warmup <<<"$c"
    g=$(med "$n" "$size" grex) ga=$(med "$n" "$size" grex_alloc) o=$(med "$n" "$size" ompi)
    gr=$(med "$n" "$size" gloo_ring) gh=$(med "$n" "$size" gloo_hd)
    b=$(bytes_of "$size")
    echo "$b $g $ga $o $gr $gh" >>"$OUT/plot_n$n.dat"
    awk -v label="${label//_/ }" -v b="$b" -v g="$g" -v ga="$ga" -v o="$o" -v gr="$gr" -v gh="$gh" \
        -v fg="$(fmt "$g")" -v fga="$(fmt "$ga")" -v fo="$(fmt "$o")" -v fgr="$(fmt "$gr")" -v fgh="$(fmt "$gh")" '
      function ratio(x, y, lim) { return (x == "NA" || y == "NA") ? "n/a" : sprintf("%.2f %s", x / y, (x / y <= lim) ? "yes" : "NO") }
      BEGIN {
      lim = (b >= 1048576) ? 0.8 : 1.0
      best = "NA"
      if (gr != "NA") best = gr
      if (gh != "NA" && (best == "NA" || gh + 0 < best + 0)) best = gh
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label, fg, fga, fo, ratio(g, o, lim), ratio(ga, o, lim),
             fgr, fgh, ratio(g, best, 0.5)
    }'
  done
  # busbw at 256 MiB against the memory-bandwidth bound.
  awk -v n="$n" -v cores="$CORES" -v rc="$R_COPY" -v ra="$R_ADD" \
      -v g="$(med "$n" 256M grex)" -v ga="$(med "$n" 256M grex_alloc)" -v o="$(med "$n" 256M ompi)" -v gr="$(med "$n" 256M gloo_ring)" \
      -v gh="$(med "$n" 256M gloo_hd)" 'BEGIN {
    s = 268435456; f = 2 * (n - 1) / n; share = (cores < n) ? cores / n : 1
    bound = 2 / (1 / ra + 1 / rc) * share
    printf "\nmemory-bandwidth bound at %d ranks: 2 / (1/%.2f + 1/%.2f) x %.2f = %.2f GB/s busbw ", n, ra, rc, share, bound
    printf "(R_add %.2f GB/s of c, R_copy %.2f GB/s copied, best of the run'\''s membw)\n", ra, rc
    printf "busbw at 256 MiB (GB/s, fraction of the bound; goal for grex >= 0.8):"
    split("grex grex_alloc OMPI Gloo_ring Gloo_HD", name, " "); t[1] = g; t[2] = ga; t[3] = o; t[4] = gr; t[5] = gh
    for (i = 1; i <= 5; ++i) {
      if (t[i] == "NA") { printf " %s n/a;", name[i]; continue }
      bw = f * s / (t[i] * 1e3)
      printf " %s %.2f (%.2f%s);", name[i], bw, bw / bound, (i <= 2) ? ((bw / bound >= 0.8) ? " yes" : " NO") : ""
    }
    printf "\n"
  }'
done


# --- plot: time per call against size, one panel per rank count (gnuplot, if installed) ---
PLOT=${PLOT:-$OUT/allreduce.png}
if command -v gnuplot >/dev/null; then
  nr=$(wc -w <<<"$RANKS")
  {
    echo "set terminal pngcairo size $((640 * nr)),520 font ',10'"
    echo "set output '$PLOT'"
    echo "set datafile missing 'NA'"
    echo "set logscale xy; set grid; set key top left"
    echo "set xlabel 'message size (bytes)'; set ylabel 'time per allreduce (us, lower is better)'"
    echo "set format x '%.0s%cB'"
    echo "set multiplot layout 1,$nr title 'allreduce, float sum, one host ($CORES cores), medians of $REPEAT rounds: grex ${GREX_VERSION%%[ ,]*}'"
    for n in $RANKS; do
      f=$OUT/plot_n$n.dat
      echo "set title '$n ranks'"
      echo "plot '$f' using 1:2 with linespoints lw 2 title 'grex (malloc)', '$f' using 1:3 with linespoints lw 2 title 'grex (alloc)', '$f' using 1:4 with linespoints title 'Open MPI 4.1', '$f' using 1:5 with linespoints title 'Gloo ring', '$f' using 1:6 with linespoints title 'Gloo halving-doubling'"
    done
    echo "unset multiplot"
  } >"$OUT/plot.gp"
  if gnuplot "$OUT/plot.gp" 2>"$OUT/logs/gnuplot.log"; then
    echo
    echo "plot: $PLOT (gnuplot script $OUT/plot.gp)"
  else
    echo "# gnuplot failed; see $OUT/logs/gnuplot.log" >&2
  fi
else
  echo "# no plot: gnuplot is not installed (apt-get install gnuplot-nox)" >&2
fi

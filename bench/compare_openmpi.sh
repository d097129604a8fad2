#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex vs Open MPI: 2-rank float-sum allreduce at 1 MiB, 16 MiB and 256 MiB on
# one host, both over shared memory, run alternately in the same invocation so
# both see the same machine load. Each (grex, Open MPI) pair runs REPEATS times;
# the table reports the medians of the out-of-place time per call (the slowest
# rank's average).
#
# Builds nothing: expects a configured and built build dir (default build/;
# BUILD=build-perf to use another). Commands, for size S with N iterations and
# W warmup iterations (N/W: 1M 100/10, 16M 20/3, 256M 5/1):
#
#   $BUILD/apps/grex-run/grex-run -n 2 --no-tag-output -- \
#       $BUILD/apps/grex-perf/grex-perf allreduce -b S -e S -n N -w W -c 0 --inplace 0
#   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
#       mpirun -np 2 --oversubscribe --bind-to none $BUILD/bench/mpi_allreduce -n N -w W S
#
# Open MPI keeps its defaults otherwise: the vader BTL (shared memory, CMA
# single copy) and the tuned collective component pick the algorithm.
# --bind-to none matches grex-run, which does not pin ranks.
#
# Usage: bench/compare_openmpi.sh            (env: BUILD, REPEATS)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
REPEATS=${REPEATS:-3}
GREX_RUN=$BUILD/apps/grex-run/grex-run
GREX_PERF=$BUILD/apps/grex-perf/grex-perf
MPI_BENCH=$BUILD/bench/mpi_allreduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

for f in "$GREX_RUN" "$GREX_PERF" "$MPI_BENCH"; do
  [[ -x $f ]] || { echo "compare_openmpi.sh: $f is missing; build $BUILD first (ninja -C $BUILD)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "compare_openmpi.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }

# size iterations warmup
CASES=("1M 100 10" "16M 20 3" "256M 5 1")

grex_time() {  # prints the out-of-place time (us) of one grex-perf run
  "$GREX_RUN" -n 2 --no-tag-output -- "$GREX_PERF" allreduce -b "$1" -e "$1" -n "$2" -w "$3" -c 0 --inplace 0 |
    awk '/^ *[0-9]/ { print $5 }'
}

ompi_time() {  # prints the time (us) of one mpi_allreduce run
  mpirun -np 2 --oversubscribe --bind-to none "$MPI_BENCH" -n "$2" -w "$3" "$1" | awk 'NF == 2 { print $2 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# grex vs Open MPI allreduce, float sum, 2 ranks, $(nproc) cores, median of $REPEATS alternating pairs"
echo "# $(mpirun --version 2>/dev/null | head -1); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| size | grex time (us) | Open MPI time (us) | ratio grex/OMPI | grex runs (us) | Open MPI runs (us) |"
echo "|---:|---:|---:|---:|---|---|"
for c in "${CASES[@]}"; do
  read -r size iters warmup <<<"$c"
  g=() o=()
  for ((r = 0; r < REPEATS; ++r)); do
    g+=("$(grex_time "$size" "$iters" "$warmup")")
    o+=("$(ompi_time "$size" "$iters" "$warmup")")
  done
  gm=$(printf '%s\n' "${g[@]}" | median)
  om=$(printf '%s\n' "${o[@]}" | median)
  ratio=$(awk -v a="$gm" -v b="$om" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
  echo "| $size | $gm | $om | $ratio | ${g[*]} | ${o[*]} |"
done
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

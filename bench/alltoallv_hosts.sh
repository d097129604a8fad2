#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Alltoallv across two "hosts" (issue 27): 4 ranks under grex-run, ranks 0-1
# on host h0 and 2-3 on h1 (GREX_HOST_ID), shm inside a host and DPDK memif
# between hosts (GREX_BACKEND=auto, GREX_NET=dpdk). Each size runs pairwise,
# hierarchical (through each host's rank 0) and auto, alternating, ROUNDS
# rounds; prints each one's median time per call (slowest rank) with min-max
# and hierarchical / pairwise.
#   ROUNDS=5 SIZES="64 1024 16384 262144" bash bench/alltoallv_hosts.sh [build-dir]
set -euo pipefail
B=${1:-build}
ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-"64 1024 16384 262144"}
one() {  # MODE BYTES: prints µs
  local iters=200
  (($2 >= 65536)) && iters=40
  GREX_ALLTOALLV=$1 GREX_BACKEND=auto GREX_NET=dpdk GREX_LOG_LEVEL=error timeout 300 \
    "$B/apps/grex-run/grex-run" --no-tag-output -n 4 -- \
    sh -c "GREX_HOST_ID=h\$((GREX_RANK / 2)) exec $B/bench/alltoallv_bench $2 $iters 20" |
    awk '/^alltoallv/ { print $4 }'
}
stat() { sort -g | awk '{ v[NR] = $1 } END { printf "%.1f (%.1f-%.1f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "# alltoallv, 2 hosts x 2 ranks (shm inside, memif between), $(nproc) cores; median (min-max) of $ROUNDS alternating rounds, us per call"
echo "| piece | pairwise | hierarchical | auto | hierarchical / pairwise |"
echo "|---|---|---|---|---|"
for s in $SIZES; do
  p=() h=() a=()
  for ((k = 0; k < ROUNDS; ++k)); do
    p+=("$(one pairwise "$s")")
    h+=("$(one hierarchical "$s")")
    a+=("$(one auto "$s")")
  done
  mp=$(printf '%s\n' "${p[@]}" | med)
  mh=$(printf '%s\n' "${h[@]}" | med)
  printf '| %s B | %s | %s | %s | %.2f |\n' "$s" "$(printf '%s\n' "${p[@]}" | stat)" "$(printf '%s\n' "${h[@]}" | stat)" \
    "$(printf '%s\n' "${a[@]}" | stat)" "$(awk -v a="$mh" -v b="$mp" 'BEGIN { print a / b }')"
done

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compressed allreduce against the uncompressed one (issue 29), side by side
# in one run: REPEAT rounds, the formats alternating inside each round;
# medians with min-max. Over dpdk memif between the ranks of this host, with
# the driver's emulated bottleneck (GREX_DPDK_BOTTLENECK_MBPS, default 10000:
# every received frame queues for a 10 Gbit/s link), float32 sum of SIZE
# (default 64M), out of place, checked:
#   GREX_DPDK_BOTTLENECK_MBPS=10000 grex-run -n R --backend dpdk -- \
#     grex-perf allreduce -b SIZE -e SIZE -n 3 -w 1 --inplace 0 --compress none|bf16|fp16|int8|topk
# (int8 and topk unchecked, -c 0: grex-perf's exact pattern is not exact in
# int8, and top-k 1 % sends a hundredth of it; the tests bound their error)
# Usage: bench/compressed.sh   (env: BUILD=build, REPEAT=3, RANKS="2 4", SIZE=64M, MBPS=10000)
# Each round also measures the memory floor with bench/membw (-t min(R, cores) -s SIZE):
# every rank reads its SIZE of input and writes SIZE of output, so no format
# can beat R copies of SIZE on this machine's cores (the table's last lines).
# AGAINST=DIR also runs every case on the libgrex.so.0 in DIR (an older
# build's, by LD_LIBRARY_PATH under the same binaries) right before this
# build's: a table for each library, then this build's medians over AGAINST's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
REPEAT=${REPEAT:-3} RANKS=${RANKS:-"2 4"} SIZE=${SIZE:-64M} MBPS=${MBPS:-10000}
export GREX_LOG_LEVEL=error GREX_DPDK_BOTTLENECK_MBPS=$MBPS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
read -r -a formats <<<"${FORMATS:-none bf16 fp16 int8 topk}"
libs=(this)
if [[ -n ${AGAINST:-} ]]; then
  [[ -e $AGAINST/libgrex.so.0 ]] || { echo "compressed.sh: AGAINST=$AGAINST holds no libgrex.so.0" >&2; exit 1; }
  libs=(against this)
fi
cores=$(getconf _NPROCESSORS_ONLN)
for ((round = 1; round <= REPEAT; round++)); do
  for n in $RANKS; do
    # The floor: the faster of memcpy and streaming stores, per thread, min(n, cores) threads at once.
    "$BUILD/bench/membw" -t $((n < cores ? n : cores)) -s "$SIZE" -r 3 |
      awk -v n="$n" '$1 == "memcpy_GBps" || $1 == "ntcopy_GBps" { if ($2 > b) b = $2 } END { print n, b }' >> "$tmp/membw"
    for f in "${formats[@]}"; do
      for lib in "${libs[@]}"; do
        libenv=()
        [[ $lib == against ]] && libenv=("LD_LIBRARY_PATH=$AGAINST")
        env "${libenv[@]}" "$BUILD/apps/grex-run/grex-run" -n "$n" --backend dpdk --no-tag-output -- "$BUILD/apps/grex-perf/grex-perf" \
          allreduce -b "$SIZE" -e "$SIZE" -n 3 -w 1 --inplace 0 --compress "$f" -c "$([[ $f == int8 || $f == topk ]] && echo 0 || echo 1)" |
          awk -v n="$n" -v f="$f" '$1 ~ /^[0-9]+$/ && NF >= 8 { if ($8 != "0" && $8 != "N/A") { print "wrong elements" > "/dev/stderr"; exit 1 } print n, f, $5 }' >> "$tmp/runs.$lib"
      done
    done
  done
  echo "compressed: round $round/$REPEAT done" >&2
done
source "$ROOT/bench/compressed_table.sh"
if [[ -z ${AGAINST:-} ]]; then
  compressed_table "$tmp/runs.this" "$RANKS" uncompressed
  echo
  compressed_floor "$tmp/runs.this" "$tmp/membw" "$RANKS" "$SIZE" "$cores"
  exit 0
fi
echo "AGAINST's library ($AGAINST):"
compressed_table "$tmp/runs.against" "$RANKS" uncompressed
echo
echo "this build's library:"
compressed_table "$tmp/runs.this" "$RANKS" uncompressed
echo
compressed_floor "$tmp/runs.this" "$tmp/membw" "$RANKS" "$SIZE" "$cores"
echo
compressed_against "$tmp/runs.against" "$tmp/runs.this" "$RANKS" "${formats[@]}"

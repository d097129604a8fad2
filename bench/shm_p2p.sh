#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex shm point-to-point against the memory system: send_bw from rank 0 to
# rank 1 at 1 MiB .. 256 MiB with a single-core memcpy of the same size
# measured in the sender right before each size (--memcpy-ref), once with
# malloc buffers and once with Communicator::alloc buffers (--alloc); then the
# 8-byte send_lat half round trip with both kinds of buffer.
#
# Builds nothing: expects a built build dir (default build/; BUILD=build-perf to
# use another). Commands, for size S with N = clamp(2 GiB / S, 8, 1000) messages:
#
#   $BUILD/apps/grex-run/grex-run -n 2 --no-tag-output -- \
#       $BUILD/apps/grex-perf/grex-perf send_bw --memcpy-ref -s S -n N [--alloc]
#   $BUILD/apps/grex-run/grex-run -n 2 --no-tag-output -- \
#       $BUILD/apps/grex-perf/grex-perf send_lat -s 8 -n 10000 [--alloc]
#
# Usage: bench/shm_p2p.sh            (env: BUILD)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
GREX_RUN=$BUILD/apps/grex-run/grex-run
GREX_PERF=$BUILD/apps/grex-perf/grex-perf
for f in "$GREX_RUN" "$GREX_PERF"; do
  [[ -x $f ]] || { echo "shm_p2p.sh: $f is missing; build $BUILD first (ninja -C $BUILD)" >&2; exit 1; }
done

readonly BUDGET_BYTES=$((2 << 30))
perf() { "$GREX_RUN" -n 2 --no-tag-output -- "$GREX_PERF" "$@" | awk '/^ *[0-9]/'; }

echo "# grex shm send_bw vs single-core memcpy, 2 ranks, $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| size | buffers | iterations | BW peak (GB/s) | BW average (GB/s) | memcpy (GB/s) | ratio avg/memcpy |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for buffers in malloc alloc; do
  flag=()
  [[ $buffers == alloc ]] && flag=(--alloc)
  for ((mib = 1; mib <= 256; mib *= 2)); do
    bytes=$((mib << 20))
    n=$((BUDGET_BYTES / bytes))
    ((n > 1000)) && n=1000
    ((n < 8)) && n=8
    perf send_bw --memcpy-ref -s "$bytes" -n "$n" "${flag[@]}" |
      awk -v m="$mib" -v b="$buffers" '{ printf "| %d MiB | %s | %d | %.2f | %.2f | %.2f | %.3f |\n", m, b, $2, $3 * 1048576 / 1e9, $4 * 1048576 / 1e9, $6, $7 }'
  done
done
echo
echo "| bytes | buffers | iterations | t_min (us) | t_typical (us) | t_avg (us) | 99% (us) | 99.9% (us) |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
for buffers in malloc alloc; do
  flag=()
  [[ $buffers == alloc ]] && flag=(--alloc)
  perf send_lat -s 8 -n 10000 "${flag[@]}" |
    awk -v b="$buffers" '{ printf "| %d | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", $1, b, $2, $3, $5, $6, $8, $9 }'
done
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

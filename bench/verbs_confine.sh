#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What confining remote writes to posted receives costs (issue 28,
# GREX_IB_CONFINE): window (each advertised receive gets a window bound before
# its advert and invalidated when it completes) and register (a registration
# of the receive's bytes, made for its advert and dropped when it completes)
# against region (adverts carry the region's rkey), side by side in one
# Soft-RoCE guest, REPEAT alternating rounds:
#  - tagged send/receive goodput, 64 KiB .. 1 MiB (every message a rendezvous):
#      grex-run -n 2 --backend verbs -- transport_bw -s S -t 128 -B 16M -d 2 -l 0
#  - a 64 KiB ping-pong (one window per receive on the latency path):
#      grex-run -n 2 --backend verbs -- grex-perf send_lat -s 65536 -n 400
# Outside a Soft-RoCE environment it re-runs itself under tests/scripts/softroce.sh
# (a qemu TCG guest here: emulated rxe, not NIC speeds).
# Usage: bench/verbs_confine.sh     (root; env BUILD, REPEAT=3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
if [[ -z ${GREX_RXE_DEV:-} ]]; then
  exec bash "$ROOT/tests/scripts/softroce.sh" --keep-cache -- \
    env BUILD="$BUILD" REPEAT="${REPEAT:-3}" bash "$ROOT/bench/verbs_confine.sh" "$@"
fi
REPEAT=${REPEAT:-3}
ulimit -l unlimited
export GREX_LOG_LEVEL=error
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=("$BUILD/apps/grex-run/grex-run" -n 2 --backend verbs --no-tag-output --)
for ((r = 0; r < REPEAT; r++)); do
  for mode in window register region; do
    # transport_bw rank 0: "bw <bytes> <gbit/s> <msgs/s> <in flight>"
    GREX_IB_CONFINE=$mode "${run[@]}" "$BUILD/bench/transport_bw" -s 64K -s 256K -s 1M -t 128 -B 16M -d 2 -l 0 |
      awk -v m="$mode" '$1 == "bw" {print m, $2, $3 * 1000 / 8}' >> "$tmp/bw"
    # grex-perf send_lat row: #bytes #iterations t_min t_max t_typical t_avg ...
    GREX_IB_CONFINE=$mode "${run[@]}" "$BUILD/apps/grex-perf/grex-perf" send_lat -s 65536 -n 400 |
      awk -v m="$mode" '$1 == 65536 {print m, $5}' >> "$tmp/lat"
  done
done
stats() {  # values on stdin: "median (min-max)"
  sort -g | awk '{a[NR]=$1} END {printf "%.1f (%.1f-%.1f)", a[int((NR+1)/2)], a[1], a[NR]}'
}
med() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| message | window (MB/s) | register (MB/s) | region (MB/s) | window / region | register / region |"
echo "|---:|---:|---:|---:|---:|---:|"
for s in 65536 262144 1048576; do
  w=$(awk -v s=$s '$1 == "window" && $2 == s {print $3}' "$tmp/bw")
  x=$(awk -v s=$s '$1 == "register" && $2 == s {print $3}' "$tmp/bw")
  g=$(awk -v s=$s '$1 == "region" && $2 == s {print $3}' "$tmp/bw")
  printf "| %d KiB | %s | %s | %s | %.3f | %.3f |\n" $((s / 1024)) "$(stats <<< "$w")" "$(stats <<< "$x")" \
    "$(stats <<< "$g")" "$(echo "$(med <<< "$w") / $(med <<< "$g")" | bc -l)" \
    "$(echo "$(med <<< "$x") / $(med <<< "$g")" | bc -l)"
done
w=$(awk '$1 == "window" {print $2}' "$tmp/lat")
x=$(awk '$1 == "register" {print $2}' "$tmp/lat")
g=$(awk '$1 == "region" {print $2}' "$tmp/lat")
echo
echo "| 64 KiB ping-pong, half round trip | window (us) | register (us) | region (us) | window / region | register / region |"
echo "|---|---:|---:|---:|---:|---:|"
printf "| t_typical | %s | %s | %s | %.3f | %.3f |\n" "$(stats <<< "$w")" "$(stats <<< "$x")" "$(stats <<< "$g")" \
  "$(echo "$(med <<< "$w") / $(med <<< "$g")" | bc -l)" "$(echo "$(med <<< "$x") / $(med <<< "$g")" | bc -l)"

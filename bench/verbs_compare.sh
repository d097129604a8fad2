#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex over verbs against perftest on the same Soft-RoCE device, side by side
# in one run (medians of REPEAT alternating runs):
#  - one-sided write bandwidth, 64 KiB .. 4 MiB, vs ib_write_bw
#  - 8-byte write latency (half round trip, memory polling) vs ib_write_lat
# Outside a Soft-RoCE environment it re-runs itself under tests/scripts/softroce.sh
# (the qemu VM on kernels without rdma_rxe: TCG speeds, not NIC speeds).
# Commands (inside; DEV = $GREX_RXE_DEV, GID = $GREX_IB_GID_INDEX, IP = $GREX_RXE_IP):
#   grex-run -n 2 --backend verbs -- transport_bw -w -s S -t 128 -B 16M -d 2 -l 3000
#   ib_write_bw -d DEV -x GID -s S -n 200MB/S & ib_write_bw -d DEV -x GID -s S -n 200MB/S IP
#   ib_write_lat -d DEV -x GID -s 8 -n 3000 & ib_write_lat -d DEV -x GID -s 8 -n 3000 IP
#   grex-run -n 2 --backend verbs -- grex-perf write_bw -s S -n (200 MiB / S) -t 128   (the tool, same flags)
#   grex-run -n 2 --backend verbs -- grex-perf write_lat -s 8 -n 3000
# Usage: bench/verbs_compare.sh     (root; env BUILD, REPEAT=3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
if [[ -z ${GREX_RXE_DEV:-} ]]; then
  exec bash "$ROOT/tests/scripts/softroce.sh" --keep-cache -- \
    env BUILD="$BUILD" REPEAT="${REPEAT:-3}" bash "$ROOT/bench/verbs_compare.sh" "$@"
fi
REPEAT=${REPEAT:-3}
DEV=$GREX_RXE_DEV GID=${GREX_IB_GID_INDEX:-1} IP=$GREX_RXE_IP
command -v ib_write_bw >/dev/null || { echo "verbs_compare: perftest missing (apt-get install perftest)" >&2; exit 1; }
ulimit -l unlimited
export GREX_LOG_LEVEL=error
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sizes=(65536 262144 1048576 4194304)

perftest() {  # TOOL ARGS...: server in the background, client in front; prints the client's table
  local tool=$1 port=$2
  shift 2
  "$tool" -d "$DEV" -x "$GID" -p "$port" "$@" > /dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  timeout 60 "$tool" -d "$DEV" -x "$GID" -p "$port" "$@" "$IP" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
}

port=18600
for ((r = 0; r < REPEAT; r++)); do
  "$BUILD/apps/grex-run/grex-run" -n 2 --backend verbs --no-tag-output -- "$BUILD/bench/transport_bw" -w \
    -s 64K -s 256K -s 1M -s 4M -t 128 -B 16M -d 2 -l 3000 >> "$tmp/grex"
  for s in "${sizes[@]}"; do
    port=$((port + 1))
    # ib_write_bw row: #bytes #iterations BW-peak BW-average[MB/s] MsgRate
    # -n for ~200 MB per run (its -D mode measures nothing at 4 MiB within its 2 s margins)
    n=$(( 209715200 / s ))
    perftest ib_write_bw "$port" -s "$s" -n "$n" | awk -v s="$s" '$1 == s {print s, $4}' >> "$tmp/pt"
    # grex-perf row: #bytes #iterations BW-peak BW-average[MB/s, as perftest] MsgRate
    "$BUILD/apps/grex-run/grex-run" -n 2 --backend verbs --no-tag-output -- "$BUILD/apps/grex-perf/grex-perf" \
      write_bw -s "$s" -n "$n" -t 128 | awk -v s="$s" '$1 == s {print s, $4}' >> "$tmp/gp"
  done
  "$BUILD/apps/grex-run/grex-run" -n 2 --backend verbs --no-tag-output -- "$BUILD/apps/grex-perf/grex-perf" \
    write_lat -s 8 -n 3000 | awk '$1 == 8 {print $5, $6}' >> "$tmp/gplat"
  port=$((port + 1))
  # ib_write_lat row: #bytes #iterations t_min t_max t_typical t_avg ...
  perftest ib_write_lat "$port" -s 8 -n 3000 | awk '$1 == 8 {print $5, $6}' >> "$tmp/ptlat"
done

echo "| message | grex write (MB/s) | ib_write_bw (MB/s) | grex / perftest (goal >= 1.0) | grex-perf write_bw (MB/s) | grex-perf / perftest |"
echo "|---:|---:|---:|---:|---:|---:|"
for s in "${sizes[@]}"; do
  g=$(awk -v s="$s" '$1 == "bw" && $2 == s {print $3 * 1e9 / 8 / 1048576}' "$tmp/grex" | median)
  p=$(awk -v s="$s" '$1 == s && $2 > 0 {print $2}' "$tmp/pt" | median)
  t=$(awk -v s="$s" '$1 == s && $2 > 0 {print $2}' "$tmp/gp" | median)
  [[ -n $p ]] || { echo "| $s | $(printf %.1f "$g") | (no result) | | $t | |"; continue; }
  printf "| %s | %.1f | %.1f | %.2f | %.1f | %.2f |\n" "$s" "$g" "$p" "$(echo "$g / $p" | bc -l)" "${t:-0}" \
    "$(echo "${t:-0} / $p" | bc -l)"
done
gl=$(awk '$1 == "lat" {print $3}' "$tmp/grex" | median)
gm=$(awk '$1 == "lat" {print $4}' "$tmp/grex" | median)
pt=$(awk '{print $1}' "$tmp/ptlat" | median)
pa=$(awk '{print $2}' "$tmp/ptlat" | median)
printf "\n| 8-byte write, half round trip (us) | grex | ib_write_lat | grex / perftest (goal <= 1.05) |\n|---|---:|---:|---:|\n"
printf "| median (perftest t_typical) | %.2f | %.2f | %.2f |\n" "$gm" "$pt" "$(echo "$gm / $pt" | bc -l)"
printf "| mean (perftest t_avg) | %.2f | %.2f | %.2f |\n" "$gl" "$pa" "$(echo "$gl / $pa" | bc -l)"
tm=$(awk '{print $1}' "$tmp/gplat" | median)
ta=$(awk '{print $2}' "$tmp/gplat" | median)
printf "| grex-perf write_lat median / mean (memory polling, as ib_write_lat) | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |\n" \
  "$tm" "$ta" "$pt" "$pa" "$(echo "$tm / $pt" | bc -l)" "$(echo "$ta / $pa" | bc -l)"
echo "# on $DEV ($GREX_SOFTROCE)"
echo
echo "# grex runs: $(awk '$1 == "bw" {printf "%s:%s ", $2, $3}' "$tmp/grex")"
echo "# perftest runs (MB/s): $(tr '\n' ' ' < "$tmp/pt")"

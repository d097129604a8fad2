#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex over DPDK memif against its peers, side by side in one run (medians of
# REPEAT alternating runs):
#  - reliable goodput (transport level, 64 messages and at most 16 MiB in
#    flight, 8 KiB .. 4 MiB), two-sided (send/recv into distinct receive
#    buffers) and one-sided (writes landing at one offset, as ib_write_bw)
#    vs the raw memif PMD at the same frame size (9000-byte frames, MTU 9000)
#  - the same goodput vs kernel TCP over loopback (iperf3, one stream), with
#    iperf3's default 128 KiB writes and with writes of the message size
#    (at most 1 MiB, iperf3's limit)
#  - 8-byte latency (half round trip) vs kernel UDP ping-pong on loopback
#  - goodput with 1 % injected loss vs lossless (1 MiB messages)
# Commands (BUILD defaults to build/):
#   grex-run -n 2 --backend dpdk -- $BUILD/bench/transport_bw -s S -t 64 -B 16M -d 2 [-w]
#   GREX_DPDK_FAULTS=drop=0.01 grex-run -n 2 --backend dpdk -- $BUILD/bench/transport_bw -s 1M -t 64 -B 16M -d 2
#   $BUILD/bench/dpdk_raw (server lcore 0, client lcore 1, --size 9000, 3 s), see bench/dpdk_raw.sh
#   iperf3 -s -1 -p P & iperf3 -c 127.0.0.1 -p P -t 3 -J [-l S]
#   $BUILD/bench/udp_pingpong 20000
# ZERO_COPY=1 runs grex on hugepages (GREX_DPDK_HUGE=1: the receiving rank,
# memif's client, takes its link in zero-copy mode; reserve hugepages first,
# e.g. echo 256 > /proc/sys/vm/nr_hugepages) and measures raw memif in
# zero-copy mode too (ZERO_COPY=1 RSIZE=7 bench/dpdk_raw.sh), as an extra row.
# The ratios stay against raw memif in copy mode, which like grex in
# zero-copy mode copies each byte once on each side.
# Usage: bench/dpdk_compare.sh            (env: BUILD, REPEAT=3, ZERO_COPY=0)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
REPEAT=${REPEAT:-3}
ZERO_COPY=${ZERO_COPY:-0}
RUN="$BUILD/apps/grex-run/grex-run -n 2 --backend dpdk --no-tag-output --"
if [[ $ZERO_COPY = 1 ]]; then
  free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
  [[ ${free:-0} -ge 64 ]] || { echo "dpdk_compare: ZERO_COPY=1 needs 64+ free hugepages (echo 256 > /proc/sys/vm/nr_hugepages)" >&2; exit 1; }
  RUN="env GREX_DPDK_HUGE=1 GREX_DPDK_MEMIF_ZERO_COPY=1 $RUN"
fi
export GREX_LOG_LEVEL=error
command -v iperf3 >/dev/null || { echo "dpdk_compare: iperf3 missing (apt-get install iperf3)" >&2; exit 1; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tcp() {  # PORT [client args]: one iperf3 run over loopback, Gbit/s
  local port=$1 json
  shift
  iperf3 -s -1 -p "$port" > /dev/null 2>&1 &
  local spid=$!
  for _ in $(seq 50); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.1; done
  if ! json=$(iperf3 -c 127.0.0.1 -p "$port" -t 3 -J "$@" 2>/dev/null); then
    kill "$spid" 2>/dev/null || true  # the client never came: do not wait on the server
  fi
  wait "$spid" 2>/dev/null || true
  python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["end"]["sum_received"]["bits_per_second"]/1e9)' <<< "$json"
}

sizes=(8192 65536 1048576 4194304)
for ((r = 0; r < REPEAT; r++)); do
  $RUN "$BUILD/bench/transport_bw" -s 8K -s 64K -s 1M -s 4M -t 64 -B 16M -d 2 -l 20000 >> "$tmp/grex" 2>/dev/null
  $RUN "$BUILD/bench/transport_bw" -s 8K -s 64K -s 1M -s 4M -t 64 -B 16M -d 2 -l 10 -w 2>/dev/null \
    | awk '$1=="bw" {$1="wbw"; print}' >> "$tmp/grex"
  GREX_DPDK_FAULTS=drop=0.01,seed=$((r + 1)) $RUN "$BUILD/bench/transport_bw" -s 1M -t 64 -B 16M -d 2 -l 100 \
    | sed 's/^bw/loss/' >> "$tmp/grex" 2>/dev/null
  ZERO_COPY=0 BUILD=$BUILD REPEAT=1 bash "$ROOT/bench/dpdk_raw.sh" 3 9000 2>/dev/null | awk '/^\| *9000/ {print $6}' >> "$tmp/raw" || true
  if [[ $ZERO_COPY = 1 ]]; then
    ZERO_COPY=1 RSIZE=7 BUILD=$BUILD REPEAT=1 bash "$ROOT/bench/dpdk_raw.sh" 3 9000 2>/dev/null \
      | awk '/^\| *9000/ {print $6}' >> "$tmp/rawzc" || true
  fi
  base=$((47400 + 8 * r))
  tcp $base >> "$tmp/tcp"
  i=1
  # iperf3 writes at most 1 MiB per call (-l): the 4 MiB row uses 1 MiB writes
  for s in "${sizes[@]}"; do echo "$s $(tcp $((base + i)) -l $((s < 1048576 ? s : 1048576)))" >> "$tmp/tcpl"; i=$((i + 1)); done
  "$BUILD/bench/udp_pingpong" 20000 >> "$tmp/udp"
done

raw=$(median < "$tmp/raw")
tcp=$(median < "$tmp/tcp")
echo "| message | in flight | grex send/recv (Gbit/s) | grex write (Gbit/s) | raw memif 9000 B (Gbit/s) | send / raw | write / raw | TCP, 128 KiB writes (Gbit/s) | send / TCP | TCP, message-size writes (Gbit/s) | send / TCP |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for s in "${sizes[@]}"; do
  g=$(awk -v s=$s '$1=="bw" && $2==s {print $3}' "$tmp/grex" | median)
  d=$(awk -v s=$s '$1=="bw" && $2==s {print $5}' "$tmp/grex" | median)
  w=$(awk -v s=$s '$1=="wbw" && $2==s {print $3}' "$tmp/grex" | median)
  tl=$(awk -v s=$s '$1==s {print $2}' "$tmp/tcpl" | median)
  printf "| %s | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f | %.2f | %.1f | %.2f |\n" "$s" "$d" "$g" "$w" "$raw" \
    "$(echo "$g / $raw" | bc -l)" "$(echo "$w / $raw" | bc -l)" "$tcp" "$(echo "$g / $tcp" | bc -l)" "$tl" "$(echo "$g / $tl" | bc -l)"
done
if [[ $ZERO_COPY = 1 ]]; then
  rawzc=$(median < "$tmp/rawzc")
  echo
  echo "grex ran with its receiving rank's memif link in zero-copy mode. Raw memif in zero-copy mode (rsize 7, its receiver reads no payload): $rawzc Gbit/s (runs: $(tr '\n' ' ' < "$tmp/rawzc"))."
fi
lat=$(awk '$1=="lat" {print $3}' "$tmp/grex" | median)
udp=$(awk '{print $3}' "$tmp/udp" | median)
printf "\n| 8-byte half round trip | grex dpdk (us) | kernel UDP loopback (us) | grex / UDP |\n|---|---:|---:|---:|\n| memif | %.2f | %.2f | %.2f |\n" "$lat" "$udp" "$(echo "$lat / $udp" | bc -l)"
lossless=$(awk '$1=="bw" && $2==1048576 {print $3}' "$tmp/grex" | median)
lossy=$(awk '$1=="loss" && $2==1048576 {print $3}' "$tmp/grex" | median)
printf "\n| 1 MiB goodput | lossless (Gbit/s) | 1 %% loss (Gbit/s) | lossy / lossless |\n|---|---:|---:|---:|\n| memif | %.1f | %.1f | %.2f |\n" "$lossless" "$lossy" "$(echo "$lossy / $lossless" | bc -l)"
echo
echo "# raw runs (Gbit/s): $(tr '\n' ' ' < "$tmp/raw"); tcp: $(tr '\n' ' ' < "$tmp/tcp"); load: $(cut -d' ' -f1-3 /proc/loadavg)"

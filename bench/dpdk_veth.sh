#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex over DPDK net_af_packet vs kernel TCP, both across the same veth pair
# between two network namespaces (MTU 9000), in one run. A second veth pair
# carries the store's TCP. Namespaces are removed on exit.
# Commands (in namespace A / B; BUILD defaults to build/):
#   grex-store --host 10.98.0.1 --port 0                                    (A)
#   GREX_BACKEND=dpdk GREX_DPDK_MODE=port GREX_DPDK_MTU=9000 GREX_DPDK_IP=10.99.0.x \
#   GREX_DPDK_PORT=net_af_packet0,iface=vX,framesz=10240,blocksz=20480,framecnt=512 \
#     transport_bw -s 64K -s 1M -t 16 -d 2                                  (A: rank 0, B: rank 1)
#   iperf3 -s -1 (B), iperf3 -c 10.99.0.2 -t 3 -J (A)
# Usage: bench/dpdk_veth.sh     (root; env BUILD, AFP_ARGS = af_packet devargs after iface=)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
A=gvA$$ B=gvB$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$A" && ip netns add "$B"
ip -n "$A" link add vA type veth peer name vB netns "$B"
ip -n "$A" link add cA type veth peer name cB netns "$B"
ip -n "$A" addr add 10.99.0.1/24 dev vA && ip -n "$B" addr add 10.99.0.2/24 dev vB
ip -n "$A" addr add 10.98.0.1/24 dev cA && ip -n "$B" addr add 10.98.0.2/24 dev cB
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
  for i in $(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^(v|c)[AB]$'); do
    ip -n "$ns" link set "$i" mtu 9000 up
  done
done
export GREX_JOB_TOKEN=bench-$$ GREX_LOG_LEVEL=error
out=$(mktemp)
ip netns exec "$A" "$BUILD/apps/grex-store/grex-store" --host 10.98.0.1 --port 0 > "$out" &
pids+=($!)
for _ in $(seq 100); do port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$out"); [[ -n $port ]] && break; sleep 0.05; done
rank() {  # ns rank iface ip
  ip netns exec "$1" env GREX_RANK=$2 GREX_WORLD_SIZE=2 GREX_STORE_ADDR=10.98.0.1:$port GREX_STORE_EXTERNAL=1 \
    GREX_BACKEND=dpdk GREX_DPDK_MODE=port GREX_DPDK_MTU=9000 GREX_DPDK_IP=$4 GREX_DPDK_LCORE=$2 \
    GREX_DPDK_PORT=net_af_packet0,iface=$3,${AFP_ARGS:-framesz=10240,blocksz=20480,framecnt=512} \
    timeout 120 "$BUILD/bench/transport_bw" -s 64K -s 1M -t 16 -d 2 -l 2000
}
rank "$B" 1 vB 10.99.0.2 > /dev/null 2>&1 &
pids+=($!)
grex=$(rank "$A" 0 vA 10.99.0.1 2>/dev/null)
wait "${pids[-1]}" || true
ip netns exec "$B" iperf3 -s -1 > /dev/null 2>&1 &
pids+=($!)
sleep 0.5
tcp=$(ip netns exec "$A" iperf3 -c 10.99.0.2 -t 3 -J 2>/dev/null | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
echo "| message | grex af_packet (Gbit/s) | kernel TCP same veth (Gbit/s) | grex / TCP |"
echo "|---:|---:|---:|---:|"
echo "$grex" | awk -v t="$tcp" '$1=="bw" {printf "| %s | %.1f | %.1f | %.2f |\n", $2, $3, t, $3/t}'
echo "$grex" | awk '$1=="lat" {printf "\n8-byte half round trip over af_packet: %s us\n", $3}'
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"

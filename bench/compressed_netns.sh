#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The compressed allreduce against float32 (issue 29) over DPDK af_packet
# between network namespaces, one rank per "host" (tests/scripts/netns_hosts.sh:
# veths on a bridge, MTU 9000), side by side in one run: REPEAT rounds, the
# formats alternating inside each round; medians with min-max of the slowest
# rank's time per call. Each rank runs, in its host's namespace:
#   GREX_BACKEND=dpdk GREX_DPDK_MODE=port GREX_DPDK_PORT=net_af_packet0,iface=d0,... \
#     grex-perf allreduce -b SIZE -e SIZE -n 3 -w 1 --inplace 0 -c 0 --compress none|bf16|fp16|int8|topk
# Usage: bench/compressed_netns.sh   (env: BUILD=build, REPEAT=3, RANKS="2 4", SIZE=64M,
#        FORMATS="none bf16 fp16 int8 topk", STATS_DIR: where set, the runs print --stats
#        and every rank's log is kept there as N-FORMAT-ROUND.rR.log)
# AGAINST=DIR also runs every case on the libgrex.so.0 in DIR (an older build's, by
# LD_LIBRARY_PATH under the same binaries) right before this build's; a table for each,
# then this build's medians over AGAINST's.
# Needs root, iproute2 and a build with DPDK.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
REPEAT=${REPEAT:-3} RANKS=${RANKS:-"2 4"} SIZE=${SIZE:-64M}
PERF=$BUILD/apps/grex-perf/grex-perf
STORE=$BUILD/apps/grex-store/grex-store
export GREX_LOG_LEVEL=error
die() { echo "compressed_netns.sh: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
for f in "$PERF" "$STORE"; do [[ -x $f ]] || die "$f is missing; build $BUILD first"; done

# shellcheck source=../tests/scripts/netns_hosts.sh
source "$ROOT/tests/scripts/netns_hosts.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grex-compressed-netns.XXXXXX")
cleanup() { hosts_teardown; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
max=0
for n in $RANKS; do ((n > max)) && max=$n; done
hosts_setup "$max" 1 || die "could not create the namespaces"
ncpu=$(nproc)

# one N FORMAT: the slowest rank's time per call (us), as rank 0 prints it.
one() {
  local n=$1 f=$2 lib=${3:-this} token r pids=() ok=1 libenv=()
  [[ $lib == against ]] && libenv=("LD_LIBRARY_PATH=$AGAINST")
  token="bench-$$-$RANDOM"
  hosts_start_store "$STORE" "$token" "$tmp/store.log" 600 >&2 || { echo nan; return; }
  for ((r = 0; r < n; ++r)); do
    GREX_RANK=$r GREX_WORLD_SIZE=$n GREX_JOB_TOKEN=$token GREX_STORE_ADDR=10.96.0.1:$store_port \
      GREX_STORE_EXTERNAL=1 GREX_BACKEND=dpdk GREX_DPDK_MODE=port \
      GREX_DPDK_PORT="net_af_packet0,iface=d0,framesz=10240,blocksz=20480,framecnt=512" \
      GREX_DPDK_IP="10.97.$r.1" GREX_DPDK_MTU=9000 GREX_DPDK_LCORE=$((r % ncpu)) \
      env "${libenv[@]}" timeout 300 ip netns exec "$(host_ns "$r")" "$PERF" allreduce -b "$SIZE" -e "$SIZE" -n 3 -w 1 -c 0 \
      --inplace 0 --compress "$f" ${STATS_DIR:+--stats} >"$tmp/r$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  if [[ -n ${STATS_DIR:-} ]]; then
    mkdir -p "$STATS_DIR"
    for ((r = 0; r < n; ++r)); do cp "$tmp/r$r.log" "$STATS_DIR/$n-$f-$round.r$r.log"; done
  fi
  kill "$store_pid" 2>/dev/null
  wait "$store_pid" 2>/dev/null
  if ((!ok)); then
    echo "$n ranks, $f failed:" >&2
    tail -n 5 "$tmp"/r*.log >&2
    echo nan
    return
  fi
  awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $5; exit }' "$tmp/r0.log"
}

read -r -a formats <<<"${FORMATS:-none bf16 fp16 int8 topk}"
libs=(this)
if [[ -n ${AGAINST:-} ]]; then
  [[ -e $AGAINST/libgrex.so.0 ]] || die "AGAINST=$AGAINST holds no libgrex.so.0"
  libs=(against this)
fi
for ((round = 1; round <= REPEAT; round++)); do
  for n in $RANKS; do
    order=("${formats[@]}")
    if ((round % 2 == 0)); then  # reversed every other round
      order=()
      for ((i = ${#formats[@]} - 1; i >= 0; i--)); do order+=("${formats[i]}"); done
    fi
    for f in "${order[@]}"; do
      for lib in "${libs[@]}"; do echo "$n $f $(one "$n" "$f" "$lib")" >> "$tmp/runs.$lib"; done
    done
  done
  echo "compressed_netns: round $round/$REPEAT done" >&2
done
source "$ROOT/bench/compressed_table.sh"
if [[ -z ${AGAINST:-} ]]; then
  compressed_table "$tmp/runs.this" "$RANKS" float32
  exit 0
fi
echo "AGAINST's library ($AGAINST):"
compressed_table "$tmp/runs.against" "$RANKS" float32
echo
echo "this build's library:"
compressed_table "$tmp/runs.this" "$RANKS" float32
echo
compressed_against "$tmp/runs.against" "$tmp/runs.this" "$RANKS" "${formats[@]}"

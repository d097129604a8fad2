#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex's DPDK port mode between two network namespaces joined by veth pairs:
# allreduce (checked) and send_bw over af_packet, at MTU 9000 and 64000 (and
# af_packet ring geometry the PMD would misplace, refused), then allreduce
# over af_xdp.
#
# Usage: netns_test.sh GREX_PERF GREX_STORE DPDK_FOUND(1|0)
#
# Layout (names carry this shell's PID so concurrent runs do not collide):
#   namespace grexA<pid>                      namespace grexB<pid>
#     vA<pid> 10.99.0.1/24  <-- data veth -->   vB<pid> 10.99.0.2/24   (DPDK port)
#     cA      10.98.0.1/24  <-- ctrl veth -->   cB      10.98.0.2/24   (store TCP)
# The store's TCP runs on the control pair because af_xdp takes the data
# interface away from the kernel. Rank 0 runs in A, rank 1 in B; every job
# gets a fresh grex-store in A. Exits 0 (pass), 1 (fail) or 77 (skip: not
# root, no `ip netns`/veth, grex built without DPDK). af_xdp alone is skipped
# ("SKIP af_xdp: ...") when this kernel cannot create the vdev.
set -u

readonly kJobTimeoutS=60    # one grex-perf job (both ranks; about 1 s when healthy)
readonly kStepTimeoutS=10   # one `ip` command, the store coming up
readonly kAfPacketMtu=9000
readonly kJumboMtu=64000  # links only software carries; grex's mbufs hold up to 65258
readonly kJumboDevargs="framesz=64512,blocksz=258048,framecnt=256"
readonly kAfPacketDevargs="framesz=10240,blocksz=20480,framecnt=512"
readonly kAfXdpLinkMtu=3498  # veth peer MTU <= 3506 or XDP will not attach
readonly kAfXdpMtu=3434      # af_xdp carries frames <= 3456 B (mbuf room 3840 - 384), less 22 B of L2

skip() { echo "SKIP: $*"; exit 77; }
fail_count=0
fail() { echo "FAIL: $*"; fail_count=$((fail_count + 1)); }

[[ $# -eq 3 ]] || { echo "usage: $0 GREX_PERF GREX_STORE DPDK_FOUND"; exit 2; }
perf=$(readlink -f "$1")
store=$(readlink -f "$2")
[[ $3 == 1 ]] || skip "grex was built without DPDK (libdpdk not found)"
[[ -x $perf && -x $store ]] || { echo "FAIL: $1 or $2 is not an executable"; exit 1; }
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  skip "'ip netns' is unavailable (iproute2)"
fi
command -v timeout >/dev/null || skip "timeout(1) is unavailable"

# shellcheck source=../../scripts/netns_hosts.sh
source "$(dirname "$0")/../../scripts/netns_hosts.sh"  # hosts_start_store
ns_a="grexA$$"
ns_b="grexB$$"
dev_a="vA$$"  # <= 15 characters for PIDs up to 13 digits
dev_b="vB$$"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grex-netns.XXXXXX")
pids=()  # every background process this script started (timeout wrappers)

# shellcheck disable=SC2317  # invoked through the trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p ns inside=()
  # Anything still alive inside our namespaces is ours: ranks, stores.
  for ns in "$ns_a" "$ns_b"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do inside+=("$p"); done
  done
  for p in ${pids[@]+"${pids[@]}"} ${inside[@]+"${inside[@]}"}; do kill -TERM "$p" 2>/dev/null; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    local alive=0
    for p in ${pids[@]+"${pids[@]}"}; do kill -0 "$p" 2>/dev/null && alive=1; done
    for ns in "$ns_a" "$ns_b"; do [[ -n $(ip netns pids "$ns" 2>/dev/null) ]] && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  for p in ${pids[@]+"${pids[@]}"}; do kill -KILL "$p" 2>/dev/null; done
  for ns in "$ns_a" "$ns_b"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null  # takes its veth ends (and so both pairs) with it
  done
  # A rank killed mid-run leaves its empty EAL runtime directory (--file-prefix grex-<pid>).
  for p in ${inside[@]+"${inside[@]}"}; do rmdir "/var/run/dpdk/grex-$p" 2>/dev/null; done
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step() { timeout "$kStepTimeoutS" "$@"; }

setup_netns() {
  step ip netns add "$ns_a" || return 1
  step ip netns add "$ns_b" || return 1
  step ip link add "$dev_a" netns "$ns_a" type veth peer name "$dev_b" netns "$ns_b" || return 1
  step ip link add cA netns "$ns_a" type veth peer name cB netns "$ns_b" || return 1
  step ip -n "$ns_a" addr add 10.99.0.1/24 dev "$dev_a" &&
    step ip -n "$ns_b" addr add 10.99.0.2/24 dev "$dev_b" &&
    step ip -n "$ns_a" addr add 10.98.0.1/24 dev cA &&
    step ip -n "$ns_b" addr add 10.98.0.2/24 dev cB || return 1
  local ns
  for ns in "$ns_a" "$ns_b"; do step ip -n "$ns" link set lo up || return 1; done
  step ip -n "$ns_a" link set cA up && step ip -n "$ns_b" link set cB up || return 1
  set_data_mtu "$kAfPacketMtu"
}

set_data_mtu() {
  step ip -n "$ns_a" link set "$dev_a" mtu "$1" up && step ip -n "$ns_b" link set "$dev_b" mtu "$1" up
}

# Starts a grex-store in namespace A on the control address; sets store_port.
start_store() {
  hosts_start_store "$store" "$token" "$tmp/$1.store.log" $((kJobTimeoutS + 30)) "$ns_a" 10.98.0.1 || return 1
  pids+=("$store_pid")
}

# Drops a reaped PID from the cleanup list (it may be reused by then).
forget() {
  local keep=() p
  for p in ${pids[@]+"${pids[@]}"}; do [[ $p == "$1" ]] || keep+=("$p"); done
  pids=(${keep[@]+"${keep[@]}"})
}

stop_store() {
  kill -TERM "$store_pid" 2>/dev/null
  wait "$store_pid" 2>/dev/null
  forget "$store_pid"
}

# run_job NAME RANKS PMD_ARGS MTU -- GREX_PERF_ARGS...
# Runs rank r (< RANKS) in namespace A/B on device vA/vB; PMD_ARGS is the vdev
# with "@DEV@" for the interface. Logs go to $tmp/NAME.r<rank>.log; returns 0
# when every rank exited 0.
run_job() {
  local name=$1 ranks=$2 pmd=$3 mtu=$4
  shift 5
  token="grex-netns-$$-$name-$RANDOM"
  start_store "$name" || return 1
  local ns=("$ns_a" "$ns_b") dev=("$dev_a" "$dev_b") ip=(10.99.0.1 10.99.0.2)
  local ncpu r rank_pids=() rc=0
  ncpu=$(nproc)
  for ((r = 0; r < ranks; ++r)); do
    GREX_RANK=$r GREX_WORLD_SIZE=$ranks GREX_JOB_TOKEN="$token" \
      GREX_STORE_ADDR="10.98.0.1:$store_port" GREX_STORE_EXTERNAL=1 GREX_BACKEND=dpdk \
      GREX_DPDK_MODE=port GREX_DPDK_PORT="${pmd//@DEV@/${dev[r]}}" GREX_DPDK_IP="${ip[r]}" \
      GREX_DPDK_MTU="$mtu" GREX_DPDK_LCORE=$((r % ncpu)) GREX_LOG_LEVEL="${GREX_LOG_LEVEL:-info}" \
      timeout -k 5 "$kJobTimeoutS" ip netns exec "${ns[r]}" "$perf" "$@" >"$tmp/$name.r$r.log" 2>&1 &
    rank_pids+=($!)
    pids+=($!)
  done
  for ((r = 0; r < ranks; ++r)); do
    wait "${rank_pids[r]}"
    local st=$?
    forget "${rank_pids[r]}"
    if ((st != 0)); then
      rc=1
      echo "$name: rank $r exited $st$( ((st == 124)) && echo " (timed out after ${kJobTimeoutS}s)")"
    fi
  done
  stop_store
  return "$rc"
}

# The kernel's count of UDP datagrams for a port without a socket, in namespace $1.
udp_noports() {
  ip netns exec "$1" awk '$1 == "Udp:" { if (!c) { for (i = 2; i <= NF; ++i) if ($i == "NoPorts") c = i } else print $c }' \
    /proc/net/snmp
}

show_logs() {
  local f
  for f in "$tmp/$1".*.log; do
    echo "---- ${f##*/} (last 40 lines)"
    tail -n 40 "$f"
  done
}

# check NAME: run_job's status plus an assertion on rank 0's output.
check() {
  local name=$1 st=$2 pattern=$3 t0=$4
  local dt=$((SECONDS - t0))
  if ((st == 0)) && grep -Eq "$pattern" "$tmp/$name.r0.log"; then
    echo "PASS $name (${dt}s)"
    grep -E "$pattern" "$tmp/$name.r0.log" | sed 's/^/  /'
  else
    ((st == 0)) && echo "$name: rank 0's output lacks /$pattern/"
    fail "$name (${dt}s)"
    show_logs "$name"
  fi
}

setup_netns || skip "could not create namespaces and veth pairs (no veth support?)"
echo "namespaces $ns_a/$ns_b, data $dev_a<->$dev_b, control cA<->cB"

allreduce=(allreduce -b 8 -e 16M -f 4 -n 5 -w 1 -c 1)
readonly kAllreduceOk='Out of bounds values : 0 OK'

# (a) af_packet, MTU 9000
af_packet="net_af_packet0,iface=@DEV@,$kAfPacketDevargs"
t0=$SECONDS
run_job af_packet_allreduce 2 "$af_packet" "$kAfPacketMtu" -- "${allreduce[@]}"
check af_packet_allreduce $? "$kAllreduceOk" "$t0"
t0=$SECONDS
noports0=$(udp_noports "$ns_b")
run_job af_packet_send_bw 2 "$af_packet" "$kAfPacketMtu" -- send_bw -s 1M -n 200
check af_packet_send_bw $? '^ *1048576 +200 +[0-9.]+ +[0-9.]+ +[0-9.]+' "$t0"
# On af_packet grex answers to a MAC of its own (GREX_DPDK_MAC=auto), so B's
# kernel drops its frames as another host's before IP: none of the 23 000
# reached UDP, which counts a datagram for a port without a socket as NoPorts.
# With the interface's MAC (GREX_DPDK_MAC=port) every frame does.
noports1=$(udp_noports "$ns_b")
t0=$SECONDS
GREX_DPDK_MAC=port run_job af_packet_port_mac 2 "$af_packet" "$kAfPacketMtu" -- send_bw -s 1M -n 20
check af_packet_port_mac $? '^ *1048576 +20 +[0-9.]+ +[0-9.]+ +[0-9.]+' "$t0"
noports2=$(udp_noports "$ns_b")
# A veth has no rate of its own (the af_packet PMD and sysfs say 10 Gbit/s
# all the same): the controller's ceiling is the driver's default, 100 Gbit/s.
t0=$SECONDS
GREX_CC=rttcc run_job af_packet_line_rate 2 "$af_packet" "$kAfPacketMtu" -- allreduce -b 1M -e 1M -n 5 -w 1 -c 1 --stats
check af_packet_line_rate $? 'line_rate_mbps=100000( |$)' "$t0"
if ((noports1 - noports0 < 100 && noports2 - noports1 >= 1000)); then
  echo "PASS kernel IP stack bypassed: UDP NoPorts in B rose by $((noports1 - noports0)) with GREX_DPDK_MAC=auto, $((noports2 - noports1)) with port"
else
  fail "UDP NoPorts in B rose by $((noports1 - noports0)) with GREX_DPDK_MAC=auto (want < 100) and $((noports2 - noports1)) with port (want >= 1000)"
fi

# (a2) af_packet at MTU 64000 (veths take up to 65535): 63 KiB frames in
# blocks of four, every size up to 16 MiB exact; then frames that do not fit
# their blocks whole, which DPDK 22.11's PMD would misplace (its sends then
# stall for good), refused at once with a message naming the rule.
if set_data_mtu "$kJumboMtu"; then
  t0=$SECONDS
  run_job af_packet_jumbo 2 "net_af_packet0,iface=@DEV@,$kJumboDevargs" "$kJumboMtu" -- "${allreduce[@]}"
  check af_packet_jumbo $? "$kAllreduceOk" "$t0"
  t0=$SECONDS
  run_job af_packet_blocks 1 "net_af_packet0,iface=@DEV@,framesz=64512,blocksz=131072,framecnt=256" "$kJumboMtu" -- \
    allreduce -b 8 -e 8 -n 1 -w 0 -c 1
  st=$?
  if ((st != 0)) && grep -q 'not a multiple of framesz' "$tmp/af_packet_blocks.r0.log"; then
    echo "PASS af_packet_blocks ($((SECONDS - t0))s): refused, $(grep -o 'af_packet blocksz [^;]*' "$tmp/af_packet_blocks.r0.log" | head -1)"
  else
    fail "af_packet_blocks: exit $st, want a refusal naming blocksz and framesz"
    show_logs af_packet_blocks
  fi
else
  echo "SKIP af_packet_jumbo: cannot set the veth MTU to $kJumboMtu"
fi

# (b) af_xdp: probe the vdev with a one-rank job first; only a refusal by the
# PMD (the error names the vdev) is a skip, anything else a failure.
af_xdp="net_af_xdp0,iface=@DEV@"
if ! set_data_mtu "$kAfXdpLinkMtu"; then
  echo "SKIP af_xdp: cannot set the veth MTU to $kAfXdpLinkMtu"
else
  t0=$SECONDS
  if run_job af_xdp_probe 1 "$af_xdp" "$kAfXdpMtu" -- allreduce -b 8 -e 8 -n 1 -w 0 -c 1; then
    run_job af_xdp_allreduce 2 "$af_xdp" "$kAfXdpMtu" -- "${allreduce[@]}"
    check af_xdp_allreduce $? "$kAllreduceOk" "$t0"
  else
    why=$(grep -E '^grex-perf: .*net_af_xdp0' "$tmp/af_xdp_probe.r0.log" | tail -n 1)
    if [[ -n $why ]]; then
      why=${why#grex-perf: }
      echo "SKIP af_xdp: ${why%%; hint:*}"
      grep -E 'af_xdp|xdp|XDP' "$tmp/af_xdp_probe.r0.log" | grep -v '^grex-perf:' | tail -n 5 | sed 's/^/  /'
    else
      fail "af_xdp probe (one rank) failed for a reason other than the vdev"
      show_logs af_xdp_probe
    fi
  fi
fi

if ((fail_count > 0)); then
  echo "$fail_count check(s) failed"
  exit 1
fi
echo "all checks passed"
exit 0

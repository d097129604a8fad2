#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One job across "hosts" that are network namespaces (issue 27): inside a
# host its ranks use shm; between hosts DPDK af_packet ports at MTU 9000, one
# port per local rank (a GREX_DPDK_PORT list: the rails), all joined by a
# bridge in a "switch" namespace. Checks, on rank 0's grex-perf output:
#   - 2 hosts x 2 ranks, 3 hosts of 1, 2 and 3 ranks, 4 hosts x 1 rank:
#     every collective mode with validation (-c 1), allreduce with the
#     hierarchical and flat algorithms and every dtype, inside a host through
#     the ring and through the shared slots; the topology line;
#     RTTCC on the inter-host flows by default;
#   - every rank of one host killed at once: the survivors exit with an
#     error naming a dead rank within twice GREX_TIMEOUT_MS;
#   - the links of one host cut (its veths down on the switch): every rank
#     ends with an error, none hangs.
#
#   - a stranger on the switch forging CLOSE, ACK, DATA and writes with valid
#     CRCs in rank 1's name: the allreduce stays exact, every forgery is
#     refused by its tag (and with GREX_WIRE_AUTH=off the same attack ends the job).
#
# Usage: hosts_netns_test.sh GREX_PERF GREX_STORE DPDK_FOUND(1|0) WIRE_FORGER
# GREX_TEST_ONLY=NAME (a glob) runs only the checks it matches.
# Exits 0 (pass), 1 (fail) or 77 (skip: not root, no `ip netns`/veth/bridge,
# grex built without DPDK). Names carry this shell's PID so runs do not collide.
set -u

readonly kJobTimeoutS=90   # one job, all ranks (a few seconds when healthy)
readonly kStepTimeoutS=10  # one `ip` command, the store coming up
readonly kDevargs="framesz=10240,blocksz=20480,framecnt=512"
readonly kFailTimeoutMs=4000  # GREX_TIMEOUT_MS of the failure jobs

skip() { echo "SKIP: $*"; exit 77; }
fail_count=0
fail() { echo "FAIL: $*"; fail_count=$((fail_count + 1)); }

[[ $# -eq 4 ]] || { echo "usage: $0 GREX_PERF GREX_STORE DPDK_FOUND WIRE_FORGER"; exit 2; }
perf=$(readlink -f "$1")
store=$(readlink -f "$2")
forger=$(readlink -f "$4")
[[ $3 == 1 ]] || skip "grex was built without DPDK (libdpdk not found)"
[[ -x $perf && -x $store ]] || { echo "FAIL: $1 or $2 is not an executable"; exit 1; }
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  skip "'ip netns' is unavailable (iproute2)"
fi
command -v timeout >/dev/null || skip "timeout(1) is unavailable"

readonly kMaxHosts=4
# shellcheck source=../../scripts/netns_hosts.sh
source "$(dirname "$0")/../../scripts/netns_hosts.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grex-hosts.XXXXXX")
pids=()  # background processes this script started (timeout wrappers)

# shellcheck disable=SC2317  # invoked through the trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill -TERM "$p" 2>/dev/null; done
  hosts_teardown
  for p in ${pids[@]+"${pids[@]}"}; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_store() {
  hosts_start_store "$store" "$token" "$tmp/$1.store.log" $((kJobTimeoutS + 30)) || return 1
  pids+=("$store_pid")
}

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

# start_job NAME LAYOUT -- GREX_PERF_ARGS...: LAYOUT lists the ranks per host
# ("2,2"); ranks are numbered host by host. Every rank of a host gets the
# host's whole port list and picks its entry by local rank. Sets job_pids
# (by rank) and job_hosts (the host of each rank).
start_job() {
  local name=$1 layout=$2
  shift 3
  token="grex-hosts-$$-$name-$RANDOM"
  start_store "$name" || return 1
  local sizes h i r=0 ncpu world=0 ports ips
  IFS=, read -r -a sizes <<<"$layout"
  for h in "${sizes[@]}"; do world=$((world + h)); done
  ncpu=$(nproc)
  job_pids=()
  job_hosts=()
  for ((h = 0; h < ${#sizes[@]}; ++h)); do
    ports="" ips=""
    for ((i = 0; i < sizes[h]; ++i)); do
      if [[ ${pmd:-af_packet} == af_xdp ]]; then
        ports+="${ports:+;}net_af_xdp$i,iface=d$i"
      else
        ports+="${ports:+;}net_af_packet$i,iface=d$i,$kDevargs"
      fi
      ips+="${ips:+;}10.97.$h.$((i + 1))"
    done
    for ((i = 0; i < sizes[h]; ++i, ++r)); do
      GREX_RANK=$r GREX_WORLD_SIZE=$world GREX_JOB_TOKEN="$token" \
        GREX_STORE_ADDR="10.96.0.1:$store_port" GREX_STORE_EXTERNAL=1 GREX_BACKEND=auto GREX_NET=dpdk \
        GREX_DPDK_MODE=port GREX_DPDK_PORT="$ports" GREX_DPDK_IP="$ips" GREX_DPDK_MTU="${dpdk_mtu:-$hosts_mtu}" \
        GREX_DPDK_LCORE=$((r % ncpu)) GREX_LOG_LEVEL="${GREX_LOG_LEVEL:-info}" \
        timeout -k 5 "$kJobTimeoutS" ip netns exec "$(host_ns "$h")" "$perf" "$@" >"$tmp/$name.r$r.log" 2>&1 &
      job_pids+=($!)
      job_hosts+=("$h")
      pids+=($!)
    done
  done
}

# wait_job NAME: 0 when every rank exited 0; records each rank's status in job_st.
wait_job() {
  local name=$1 r st rc=0
  job_st=()
  for ((r = 0; r < ${#job_pids[@]}; ++r)); do
    wait "${job_pids[r]}"
    st=$?
    forget "${job_pids[r]}"
    job_st+=("$st")
    ((st == 0)) || rc=1
  done
  stop_store
  return "$rc"
}

show_logs() {
  local f
  for f in "$tmp/$1".*.log; do
    echo "---- ${f##*/} (last 30 lines)"
    tail -n 30 "$f"
  done
}

# check NAME LAYOUT PATTERN -- ARGS: a job whose ranks all pass and whose rank
# 0 prints PATTERN (grep -E) once per line of PATTERN given with -e.
check() {
  local name=$1 layout=$2
  [[ -z ${GREX_TEST_ONLY:-} || $name == $GREX_TEST_ONLY ]] || return 0
  shift 2
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  local t0=$SECONDS ok=1 p
  start_job "$name" "$layout" "$@" || { fail "$name: could not start"; return; }
  wait_job "$name" || { ok=0; echo "$name: rank exit statuses ${job_st[*]}"; }
  for p in "${patterns[@]}"; do
    grep -Eq -- "$p" "$tmp/$name.r0.log" || { ok=0; echo "$name: rank 0's output lacks /$p/"; }
  done
  if ((ok)); then
    echo "PASS $name [$layout] ($((SECONDS - t0))s)"
    grep -E 'topology:|^ +[0-9]+ +[0-9]+ ' "$tmp/$name.r0.log" | sed 's/^/  /' | tail -n 3
  else
    fail "$name [$layout]"
    show_logs "$name"
  fi
}

hosts_setup "$kMaxHosts" 3 || skip "could not create the namespaces, bridge and veths (no veth or bridge support?)"
echo "switch $hosts_sw, hosts $(host_ns 0) .. $(host_ns $((kMaxHosts - 1)))"

readonly ok_line='Out of bounds values : 0 OK'
small=(-b 8 -e 1M -f 32 -n 2 -w 1 -c 1)

# (a) 2 hosts x 2 ranks: topology, RTTCC between hosts, every mode.
check hosts2x2_allreduce 2,2 \
  'topology: 2 hosts \(0-1 \| 2-3\), intra-host shm, inter-host dpdk, 2 rails' \
  'congestion control rttcc' "$ok_line" -- allreduce -b 8 -e 8M -f 8 -n 3 -w 1 -c 1
for mode in reduce_scatter allgather broadcast reduce alltoall; do
  check "hosts2x2_$mode" 2,2 "$ok_line" -- "$mode" "${small[@]}"
done
for algo in hierarchical ring; do
  GREX_ALGO=$algo check "hosts2x2_$algo" 2,2 "$ok_line" -- allreduce -b 4 -e 4M -f 64 -n 2 -w 1 -c 1 -d all -o all
done

# (b) uneven: 3 hosts of 1, 2 and 3 ranks (one rail); (c) 4 hosts of one rank (the network alone).
check hosts123_allreduce 1,2,3 'topology: 3 hosts \(0 \| 1-2 \| 3-5\), intra-host shm, inter-host dpdk, 1 rail' \
  "$ok_line" -- allreduce -b 4 -e 2M -f 16 -n 2 -w 1 -c 1 -d all
GREX_ALGO=hierarchical check hosts123_hierarchical 1,2,3 "$ok_line" -- allreduce -b 4 -e 1M -f 64 -n 2 -w 1 -c 1 -o all
check hosts123_alltoall 1,2,3 "$ok_line" -- alltoall "${small[@]}"
# The host's shared slots at every size (auto takes them from 1 MiB): every
# dtype and op, in place, hosts of 2 and 3 ranks with one rail (the third
# rank of a host reduces nothing) and of 2 ranks with two.
for layout in 1,2,3 2,2; do
  GREX_STAGE_SENDS=always GREX_ALGO=hierarchical check "hosts${layout//,/}_staged" "$layout" "$ok_line" -- \
    allreduce -b 4 -e 2M -f 16 -n 2 -w 1 -c 1 -d all -o all --inplace 1
done
check hosts4x1_allreduce 1,1,1,1 'topology: 4 hosts \(0 \| 1 \| 2 \| 3\), dpdk between every pair' "$ok_line" -- \
  allreduce -b 8 -e 4M -f 8 -n 2 -w 1 -c 1
# Flow ids are 32 random bits, so peers of a large job can draw the same one:
# with one bit kept, all three flows of each port share id 1, and the
# receiver tells them apart by source (issue 28).
GREX_DPDK_FLOW_ID_BITS=1 check hosts4x1_flow_ids_collide 1,1,1,1 "$ok_line" -- allreduce -b 8 -e 1M -f 16 -n 2 -w 1 -c 1

# (c2) A stranger on the switch (issue 28) sees rank 1's frames arrive on its
# port s1d0 and forges packets in rank 1's name out of s0d0 to rank 0: valid
# CRCs, the flow's real id, PSNs and counters, rank 1's MAC, IP and port.
forged_job() {  # NAME AUTH WANT(pass|fail) FORGER_SECONDS
  local name=$1 auth=$2 want=$3 t0=$SECONDS ok=1
  [[ -z ${GREX_TEST_ONLY:-} || $name == $GREX_TEST_ONLY ]] || return 0
  ip netns exec "$hosts_sw" timeout -k 5 60 "$forger" s1d0 s0d0 47000 "$4" 40 >"$tmp/$name.forger.log" 2>&1 &
  local fpid=$!
  pids+=("$fpid")
  GREX_WIRE_AUTH=$auth GREX_TIMEOUT_MS=20000 start_job "$name" 1,1 -- allreduce -b 4M -e 4M -n 300 -w 1 -c 1 --stats ||
    { fail "$name: could not start"; return; }
  wait_job "$name"
  local st=$?
  wait "$fpid"
  local fst=$?
  forget "$fpid"
  local forged refused
  forged=$(awk '/^forged/ { n = 0; for (i = 2; i <= NF; ++i) { split($i, kv, "="); n += kv[2] } print n }' \
    "$tmp/$name.forger.log")
  refused=$(grep -oE 'rx_auth_failed=[0-9]+' "$tmp/$name.r0.log" | head -1 | cut -d= -f2)
  ((fst == 0)) && [[ -n $forged ]] && ((forged > 0)) || { ok=0; echo "$name: the forger exited $fst: $(cat "$tmp/$name.forger.log")"; }
  if [[ $want == pass ]]; then
    ((st == 0)) && grep -Eq "$ok_line" "$tmp/$name.r0.log" || { ok=0; echo "$name: rank exit statuses ${job_st[*]}"; }
    [[ -n $refused ]] && ((refused * 2 >= ${forged:-1})) || { ok=0; echo "$name: rank 0 refused ${refused:-none} of ${forged:-?}"; }
  else
    ((st != 0)) || { ok=0; echo "$name: the job survived forgeries without authentication"; }
  fi
  if ((ok)); then
    echo "PASS $name ($((SECONDS - t0))s): $(cat "$tmp/$name.forger.log"); rank 0 rx_auth_failed=${refused:-0}, exits ${job_st[*]}"
  else
    fail "$name"
    show_logs "$name"
    cat "$tmp/$name.forger.log"
  fi
}
forged_job forged_refused full pass 40
forged_job forged_unauthenticated off fail 8

# (d) every rank of host 1 killed at once while the job runs allreduces.
failure_job() {  # NAME ACTION: starts 2x2, waits for the first results, does ACTION, checks the survivors
  local name=$1 action=$2 t0 r
  [[ -z ${GREX_TEST_ONLY:-} || $name == $GREX_TEST_ONLY ]] || return 0
  GREX_TIMEOUT_MS=$kFailTimeoutMs start_job "$name" 2,2 -- allreduce -b 1M -e 1M -n 1000000 -w 1 -c 0 ||
    { fail "$name: could not start"; return; }
  # Once every rank is connected, a second of allreduces (grex-perf prints a
  # size's line after its iterations: with -n 1000000, never).
  for _ in $(seq 1 300); do
    [[ $(cat "$tmp/$name".r*.log 2>/dev/null | grep -c "communicator 'grex' ready") -ge 4 ]] && break
    sleep 0.1
  done
  sleep 1
  t0=$(date +%s%N)
  $action
  wait_job "$name"
  local dt_ms=$((($(date +%s%N) - t0) / 1000000)) ok=1
  for r in 0 1; do
    if ((job_st[r] == 0 || job_st[r] == 124)); then
      ok=0
      echo "$name: survivor rank $r exited ${job_st[r]} (want an error)"
    fi
  done
  if [[ $name == host_killed ]]; then
    for r in 0 1; do
      grep -Eq '(rank|peer) [23]\b' "$tmp/$name.r$r.log" || { ok=0; echo "$name: rank $r's error names no dead rank"; }
    done
    ((dt_ms <= 2 * kFailTimeoutMs + 1000)) || { ok=0; echo "$name: survivors took ${dt_ms} ms (limit $((2 * kFailTimeoutMs)) ms + 1 s)"; }
  else
    for r in 2 3; do
      if ((job_st[r] == 0 || job_st[r] == 124)); then ok=0; echo "$name: rank $r exited ${job_st[r]} (want an error)"; fi
    done
  fi
  if ((ok)); then
    echo "PASS $name (${dt_ms} ms after the event)"
    grep -h 'grex-perf:' "$tmp/$name".r*.log | sed 's/^/  /' | head -n 4
  else
    fail "$name"
    show_logs "$name"
  fi
}
kill_host1() {
  local p killed=()
  for p in $(ip netns pids "$(host_ns 1)"); do kill -KILL "$p" 2>/dev/null && killed+=("$p"); done
  sleep 0.5
  for p in ${killed[@]+"${killed[@]}"}; do rmdir "/var/run/dpdk/grex-$p" 2>/dev/null; done  # EAL's, left by SIGKILL
}
cut_host1() {
  local i
  for i in 0 1 2; do ip -n "$hosts_sw" link set "s1d$i" down; done
}
# (e) af_xdp instead of af_packet, 2 x 2: XDP attaches to a veth only up to
# MTU 3498 and carries frames up to 3456 B (DPDK-NOTES.md). A refusal by the
# PMD (the error names the vdev) is a skip, as in netns_test.sh.
set_data_mtu() {
  local h i
  for ((h = 0; h < 2; ++h)); do
    for ((i = 0; i < 2; ++i)); do
      ip -n "$(host_ns "$h")" link set "d$i" mtu "$1" && ip -n "$hosts_sw" link set "s${h}d$i" mtu "$1" || return 1
    done
  done
}
if [[ -z ${GREX_TEST_ONLY:-} || hosts2x2_af_xdp == $GREX_TEST_ONLY ]]; then
  if set_data_mtu 3498; then
    t0=$SECONDS
    if ! pmd=af_xdp dpdk_mtu=3434 start_job hosts2x2_af_xdp 2,2 -- allreduce -b 8 -e 4M -f 16 -n 2 -w 1 -c 1; then
      fail "hosts2x2_af_xdp: could not start"
    elif wait_job hosts2x2_af_xdp && grep -q "$ok_line" "$tmp/hosts2x2_af_xdp.r0.log"; then
      echo "PASS hosts2x2_af_xdp [2,2] ($((SECONDS - t0))s)"
    elif why=$(grep -hE '^grex-perf: .*net_af_xdp' "$tmp"/hosts2x2_af_xdp.r*.log | tail -n 1) && [[ -n $why ]]; then
      why=${why#grex-perf: }
      echo "SKIP af_xdp: ${why%%; hint:*}"
    else
      fail "hosts2x2_af_xdp [2,2]"
      show_logs hosts2x2_af_xdp
    fi
    set_data_mtu "$hosts_mtu" || fail "could not restore MTU $hosts_mtu"
  else
    echo "SKIP af_xdp: cannot set the veth MTU to 3498"
  fi
fi

failure_job host_killed kill_host1
failure_job link_cut cut_host1
for i in 0 1 2; do ip -n "$hosts_sw" link set "s1d$i" up; done

if ((fail_count > 0)); then
  echo "$fail_count check(s) failed"
  exit 1
fi
echo "all checks passed"
exit 0

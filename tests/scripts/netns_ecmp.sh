# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/integration/dpdk/ecmp_netns_test.sh and bench/spray_links.sh:
# two "hosts" joined by a routed fabric with several equal-cost links (issue 31).
#
#   host A --d0-- router A ==l0..l(K-1)== router B --d0-- host B
#
#   ecmp_setup K RATE_MBIT [SLOW_MBIT]
#     hosts A and B (netns_hosts.sh: a control veth each on a bridge, for the
#     store's TCP) and routers RA and RB. A host's data port d0 has no kernel
#     address: grex's af_packet port is 10.98.0.2 (A) or 10.98.1.2 (B) and
#     answers to its own MAC (ecmp_mac A|B). The routers forward between the
#     hosts' subnets over K links whose routes are equal-cost multipath,
#     hashed on the 5-tuple (the UDP source port grex sprays over), and each
#     link leaves RA through a token bucket of RATE_MBIT (tbf: the kernel here
#     has tbf, not netem); with SLOW_MBIT, link 0 gets that rate instead.
#     MTU 9000 throughout. Returns 1 when something cannot be made.
#   ecmp_mac A|B      the MAC grex answers to on host A or B (GREX_DPDK_MAC)
#   ecmp_gateway A|B  the MAC of the router in front of host A or B (GREX_DPDK_GATEWAY)
#   ecmp_link_bytes   bytes each link carried from RA to RB, in link order
#   ecmp_stream       one grex-perf send_bw job from host A to host B (below)
#   ecmp_teardown     hosts_teardown, and the routers
#
# Names carry the sourcing shell's PID ($$). Needs root and iproute2.

# shellcheck source=netns_hosts.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_hosts.sh"

ecmp_ra="grexRa$$"
ecmp_rb="grexRb$$"
ecmp_links=0
readonly ecmp_job_timeout_s=60

ecmp_mac() { [[ $1 == A ]] && echo 02:00:00:0a:00:02 || echo 02:00:00:0b:00:02; }

ecmp_gateway() {
  local ns=$ecmp_ra
  [[ $1 == A ]] || ns=$ecmp_rb
  ip -n "$ns" -o link show hostp | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p'
}

# ecmp_router NS SIDE(0|1) HOST_NS: forwarding on, host link hostp, its neighbour.
ecmp_router() {
  local ns=$1 side=$2 host=$3 f
  hosts_step ip netns add "$ns" || return 1
  hosts_step ip -n "$ns" link set lo up || return 1
  for f in net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
    net.ipv4.fib_multipath_hash_policy=1; do
    ip netns exec "$ns" sysctl -qw "$f" || return 1
  done
  # A fixed seed: the same source ports land on the same links every run.
  ip netns exec "$ns" sysctl -qw net.ipv4.fib_multipath_hash_seed=31 2>/dev/null
  hosts_step ip link add d0 index 1024 netns "$host" type veth peer name hostp netns "$ns" || return 1
  hosts_step ip -n "$host" link set d0 mtu "$hosts_mtu" up || return 1
  hosts_step ip -n "$ns" link set hostp mtu "$hosts_mtu" up || return 1
  hosts_step ip -n "$ns" addr add "10.98.$side.1/24" dev hostp || return 1
  local mac
  mac=$(ecmp_mac "$([[ $side == 0 ]] && echo A || echo B)")
  hosts_step ip -n "$ns" neigh replace "10.98.$side.2" lladdr "$mac" dev hostp nud permanent || return 1
}

ecmp_setup() {
  local k=$1 rate=$2 slow=${3:-} i
  ecmp_links=$k
  hosts_setup 2 0 || return 1
  ecmp_router "$ecmp_ra" 0 "$(host_ns 0)" || return 1
  ecmp_router "$ecmp_rb" 1 "$(host_ns 1)" || return 1
  local hops_a=() hops_b=()
  for ((i = 0; i < k; ++i)); do
    hosts_step ip link add "l$i" netns "$ecmp_ra" type veth peer name "l$i" netns "$ecmp_rb" || return 1
    hosts_step ip -n "$ecmp_ra" addr add "10.99.$i.1/24" dev "l$i" || return 1
    hosts_step ip -n "$ecmp_rb" addr add "10.99.$i.2/24" dev "l$i" || return 1
    hosts_step ip -n "$ecmp_ra" link set "l$i" mtu "$hosts_mtu" up || return 1
    hosts_step ip -n "$ecmp_rb" link set "l$i" mtu "$hosts_mtu" up || return 1
    local r=$rate
    [[ -n $slow && $i == 0 ]] && r=$slow
    # A queue of 100 ms at the link's rate: the sender's window fills queues
    # before it could overflow one (no loss; a slow link shows as delay).
    hosts_step ip netns exec "$ecmp_ra" tc qdisc replace dev "l$i" root tbf rate "${r}mbit" burst 90000 \
      latency 100ms || return 1
    hops_a+=(nexthop via "10.99.$i.2" dev "l$i")
    hops_b+=(nexthop via "10.99.$i.1" dev "l$i")
  done
  hosts_step ip -n "$ecmp_ra" route add 10.98.1.0/24 "${hops_a[@]}" || return 1
  hosts_step ip -n "$ecmp_rb" route add 10.98.0.0/24 "${hops_b[@]}" || return 1
}

ecmp_link_bytes() {
  local i out=()
  for ((i = 0; i < ecmp_links; ++i)); do
    out+=("$(ip netns exec "$ecmp_ra" cat "/sys/class/net/l$i/statistics/tx_bytes" 2>/dev/null || echo 0)")
  done
  echo "${out[*]}"
}

ecmp_forget() {
  local keep=() p
  for p in ${pids[@]+"${pids[@]}"}; do [[ $p == "$1" ]] || keep+=("$p"); done
  pids=(${keep[@]+"${keep[@]}"})
}

# ecmp_stream NAME PATHS SPRAY MESSAGES (after ecmp_setup; uses the caller's
# $perf, $store and $tmp, and adds what it starts to its pids array while it
# runs): rank 0 (host A) sends MESSAGES x 1 MiB to rank 1 (host B) with
# grex-perf send_bw, GREX_DPDK_PATHS=PATHS and GREX_DPDK_SPRAY=SPRAY, no
# congestion control (or $ECMP_CC), a window of $ECMP_WINDOW packets (128), MTU $ECMP_MTU (9000). Sets gbps (rank
# 0's average) and shares (each link's share of the bytes RA forwarded,
# "0.05 0.48 0.47"); returns 1 (and shows the logs) when a rank failed.
ecmp_stream() {
  local name=$1 paths=$2 spray=$3 n=$4 r st rc=0 before after
  token="grex-ecmp-$$-$name-$RANDOM"
  hosts_start_store "$store" "$token" "$tmp/$name.store.log" $((ecmp_job_timeout_s + 30)) || return 1
  pids+=("$store_pid")
  read -r -a before <<<"$(ecmp_link_bytes)"
  local rank_pids=() side
  for r in 0 1; do
    side=A
    ((r == 1)) && side=B
    GREX_RANK=$r GREX_WORLD_SIZE=2 GREX_JOB_TOKEN="$token" GREX_STORE_ADDR="10.96.0.1:$store_port" \
      GREX_STORE_EXTERNAL=1 GREX_BACKEND=dpdk GREX_DPDK_MODE=port \
      GREX_DPDK_PORT="net_af_packet0,iface=d0,framesz=10240,blocksz=20480,framecnt=512" GREX_DPDK_IP="10.98.$r.2" GREX_DPDK_MTU="${ECMP_MTU:-9000}" \
      GREX_DPDK_MAC="$(ecmp_mac $side)" GREX_DPDK_GATEWAY="$(ecmp_gateway $side)" \
      GREX_DPDK_PATHS="$paths" GREX_DPDK_SPRAY="$spray" GREX_DPDK_REORDER=63 GREX_DPDK_WINDOW="${ECMP_WINDOW:-128}" GREX_CC="${ECMP_CC:-none}" \
      GREX_DPDK_LCORE=$r GREX_LOG_LEVEL="${GREX_LOG_LEVEL:-warn}" \
      timeout -k 5 "$ecmp_job_timeout_s" ip netns exec "$(host_ns "$r")" "$perf" send_bw -s 1M -n "$n" --report_gbits ${ECMP_PERF_ARGS:-} \
      >"$tmp/$name.r$r.log" 2>&1 &
    rank_pids+=($!)
    pids+=($!)
  done
  for r in 0 1; do
    wait "${rank_pids[r]}"
    st=$?
    ecmp_forget "${rank_pids[r]}"
    ((st == 0)) || { rc=1; echo "$name: rank $r exited $st"; }
  done
  kill -TERM "$store_pid" 2>/dev/null
  wait "$store_pid" 2>/dev/null
  ecmp_forget "$store_pid"
  read -r -a after <<<"$(ecmp_link_bytes)"
  gbps=$(awk '$1 == 1048576 && NF >= 4 { v = $4 } END { print v + 0 }' "$tmp/$name.r0.log")
  local total=0 i d=()
  for ((i = 0; i < ecmp_links; ++i)); do
    d+=($((after[i] - before[i])))
    total=$((total + d[i]))
  done
  shares=$(for v in "${d[@]}"; do awk -v v="$v" -v t="$total" 'BEGIN { printf "%.2f ", t ? v / t : 0 }'; done)
  if ((rc != 0)) || [[ $gbps == 0 ]]; then
    for r in 0 1; do
      echo "---- $name.r$r.log (last 30 lines)"
      tail -n 30 "$tmp/$name.r$r.log"
    done
    return 1
  fi
  return 0
}

ecmp_teardown() {
  hosts_teardown
  ip netns del "$ecmp_ra" 2>/dev/null
  ip netns del "$ecmp_rb" 2>/dev/null
  return 0
}

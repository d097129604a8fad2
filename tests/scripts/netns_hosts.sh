# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/integration/dpdk/hosts_netns_test.sh and
# bench/hosts_compare.sh: "hosts" that are network namespaces on one bridge.
#
#   hosts_setup NHOSTS NPORTS [ROOT_ADDR]
#     a switch namespace with bridge br0 (MTU 9000, or env HOSTS_MTU); hosts 0..NHOSTS-1, each
#     with a control veth "ctl" (10.96.0.<h+1>/24, for TCP: stores, Gloo, Open
#     MPI) and NPORTS data veths d0.. (10.97.<h>.<i+1>/16 in the kernel too:
#     one subnet, so the kernel's own traffic leaves a host through d0),
#     all on the bridge; with ROOT_ADDR, a veth from this namespace to the
#     bridge with that address (mpirun runs here).
#   host_ns H           the namespace of host H
#   hosts_start_store GREX_STORE TOKEN LOG LIFETIME_S [NS ADDR]
#                       a grex-store in host 0 on 10.96.0.1 (or in NS on
#                       ADDR), stopped after LIFETIME_S; sets store_pid and
#                       store_port
#   hosts_teardown      kills what runs in the namespaces, deletes them
#
# Names carry the sourcing shell's PID ($$), so concurrent runs do not collide.
# Needs root and iproute2; hosts_setup returns 1 when something cannot be made.

hosts_sw="grexSw$$"
hosts_root_veth="gxr$$"
hosts_count=0
readonly hosts_mtu=${HOSTS_MTU:-9000}

host_ns() { echo "grexH$1x$$"; }

hosts_step() { timeout 10 "$@"; }

hosts_setup() {
  local n=$1 ports=$2 root_addr=${3:-} h i ns
  hosts_count=$n
  hosts_step ip netns add "$hosts_sw" || return 1
  hosts_step ip -n "$hosts_sw" link add br0 type bridge || return 1
  hosts_step ip -n "$hosts_sw" link set br0 mtu "$hosts_mtu" up || return 1
  # A switch forwards frames; with br_netfilter loaded the bridge would also
  # run every frame through iptables (a per-namespace setting: this one only).
  local f
  for f in /proc/sys/net/bridge/bridge-nf-call-iptables /proc/sys/net/bridge/bridge-nf-call-ip6tables \
    /proc/sys/net/bridge/bridge-nf-call-arptables; do
    ip netns exec "$hosts_sw" sh -c "[ -w $f ] && echo 0 > $f" 2>/dev/null
  done
  for ((h = 0; h < n; ++h)); do
    ns=$(host_ns "$h")
    hosts_step ip netns add "$ns" || return 1
    hosts_step ip -n "$ns" link set lo up || return 1
    hosts_step ip link add ctl netns "$ns" type veth peer name "c$h" netns "$hosts_sw" || return 1
    hosts_step ip -n "$ns" addr add "10.96.0.$((h + 1))/24" dev ctl || return 1
    hosts_step ip -n "$ns" link set ctl up || return 1
    hosts_step ip -n "$hosts_sw" link set "c$h" master br0 up || return 1
    for ((i = 0; i < ports; ++i)); do
      # Interface indexes 1024 apart: DPDK's af_packet names its fanout group
      # pid ^ ifindex, and two ranks of a host whose pids differ by the xor of
      # their indexes (1 job in 30 with indexes 3, 4, 5) collide (EINVAL).
      hosts_step ip link add "d$i" index $((1024 * (i + 1))) netns "$ns" type veth peer name "s${h}d$i" \
        netns "$hosts_sw" || return 1
      hosts_step ip -n "$ns" addr add "10.97.$h.$((i + 1))/16" dev "d$i" || return 1
      hosts_step ip -n "$ns" link set "d$i" mtu "$hosts_mtu" up || return 1
      hosts_step ip -n "$hosts_sw" link set "s${h}d$i" mtu "$hosts_mtu" master br0 up || return 1
    done
  done
  if [[ -n $root_addr ]]; then
    hosts_step ip link add "$hosts_root_veth" type veth peer name croot netns "$hosts_sw" || return 1
    hosts_step ip addr add "$root_addr" dev "$hosts_root_veth" || return 1
    hosts_step ip link set "$hosts_root_veth" up || return 1
    hosts_step ip -n "$hosts_sw" link set croot master br0 up || return 1
  fi
}

hosts_teardown() {
  local h p ns pids=()
  for ((h = 0; h < hosts_count; ++h)); do
    for p in $(ip netns pids "$(host_ns "$h")" 2>/dev/null); do pids+=("$p"); done
  done
  for p in ${pids[@]+"${pids[@]}"}; do kill -TERM "$p" 2>/dev/null; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    local alive=0
    for p in ${pids[@]+"${pids[@]}"}; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  for p in ${pids[@]+"${pids[@]}"}; do kill -KILL "$p" 2>/dev/null; done
  # Deleting a namespace takes its veth ends, and so both ends of each pair.
  for ((h = 0; h < hosts_count; ++h)); do ip netns del "$(host_ns "$h")" 2>/dev/null; done
  ip netns del "$hosts_sw" 2>/dev/null
  ip link del "$hosts_root_veth" 2>/dev/null
  # A rank killed mid-run leaves its empty EAL runtime directory (--file-prefix grex-<pid>).
  for p in ${pids[@]+"${pids[@]}"}; do rmdir "/var/run/dpdk/grex-$p" 2>/dev/null; done
  return 0
}

hosts_start_store() {
  local bin=$1 token=$2 log=$3 lifetime=$4 ns=${5:-$(host_ns 0)} addr=${6:-10.96.0.1}
  rm -f "$log"  # a previous run's "listening on" line must not be read as this one's
  GREX_JOB_TOKEN="$token" timeout -k 5 "$lifetime" ip netns exec "$ns" "$bin" --host "$addr" --port 0 \
    >"$log" 2>&1 &
  store_pid=$!
  store_port=""
  for _ in $(seq 1 100); do
    store_port=$(sed -n 's/^grex-store listening on [0-9.]*:\([0-9]*\).*/\1/p' "$log")
    [[ -n $store_port ]] && return 0
    kill -0 "$store_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "grex-store did not come up:"
  cat "$log"
  return 1
}

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two hosts: two Soft-RoCE guests joined by a qemu stream netdev, each with its
# own rxe device on its virtio NIC (tests/scripts/softroce.sh --hosts 2). Rank 0
# runs in guest 0 and hosts the store on its address; rank 1 runs in guest 1.
# Over verbs between them: grex-perf allreduce with result checks (-c 1), then
# send_bw; then perftest's own form with no launcher: guest 0 serves
# `grex-perf write_bw` / `write_lat`, guest 1 runs them with guest 0's address;
# then two ranks per guest (GREX_BACKEND=auto: shm inside a guest, verbs between):
# allreduce, allgather, reduce_scatter and broadcast, checked, hierarchical.
# Exit status: 0 when both ranks pass; 77 when no Soft-RoCE VM can be made here
# (meson counts a skip).
#   two_hosts_test.sh SOFTROCE_SH GREX_PERF
set -euo pipefail
(($# == 2)) || { echo "usage: two_hosts_test.sh SOFTROCE_SH GREX_PERF" >&2; exit 2; }
softroce=$1 perf=$2
# Inside each guest: GREX_HOST_INDEX is the rank; guest 0's address is the store's.
inner='ulimit -l unlimited
export GREX_RANK=$GREX_HOST_INDEX GREX_WORLD_SIZE=2 GREX_BACKEND=verbs GREX_JOB_TOKEN=grex-two-hosts
if [ "$GREX_HOST_INDEX" = 0 ]; then store=$GREX_RXE_IP; else store=$GREX_PEER_IP; fi
export GREX_STORE_ADDR=$store:29517
"$0" allreduce -b 8 -e 1M -f 8 -n 3 -w 1 -c 1 && "$0" send_bw -s 65536 -n 100 || exit 1
unset GREX_RANK GREX_WORLD_SIZE GREX_STORE_ADDR
export GREX_JOB_TOKEN=grex-two-hosts-pair  # the pair modes have no default token any more (issue 28)
if [ "$GREX_HOST_INDEX" = 0 ]; then server=; else server=$GREX_PEER_IP; fi
"$0" write_bw -s 65536 -n 200 -q 2 -p 18515 $server && "$0" write_lat -a -e 4096 -n 100 -p 18516 $server || exit 1
# Two ranks per guest (issue 27): shm inside a guest, verbs between them, hierarchical collectives.
export GREX_WORLD_SIZE=4 GREX_BACKEND=auto GREX_NET=verbs GREX_JOB_TOKEN=grex-two-hosts-4 GREX_STORE_ADDR=$store:29518
r0=$((GREX_HOST_INDEX * 2))
for m in allreduce allgather reduce_scatter broadcast; do
  GREX_RANK=$r0 "$0" $m -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 >/tmp/grex-r0.log 2>&1 & p0=$!
  GREX_RANK=$((r0 + 1)) "$0" $m -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 >/tmp/grex-r1.log 2>&1 & p1=$!
  ok=1; wait $p0 || ok=0; wait $p1 || ok=0
  [ $ok = 1 ] || { echo "2x2 $m failed:"; tail -n 20 /tmp/grex-r0.log /tmp/grex-r1.log; exit 1; }
  if [ "$GREX_HOST_INDEX" = 0 ]; then
    grep -q "topology: 2 hosts (0-1 | 2-3), intra-host shm, inter-host verbs, 2 rails" /tmp/grex-r0.log &&
      grep -q "Out of bounds values : 0 OK" /tmp/grex-r0.log || { echo "2x2 $m: rank 0 output:"; cat /tmp/grex-r0.log; exit 1; }
    echo "2x2 $m over shm + verbs: $(grep -E "topology|Out of bounds" /tmp/grex-r0.log | tr "\n" " ")"
  fi
done'
exec "$softroce" --hosts 2 -- sh -c "$inner" "$perf"

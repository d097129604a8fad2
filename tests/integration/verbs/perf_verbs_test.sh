#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex-info and grex-perf's perftest modes on a Soft-RoCE device (one host;
# tests/scripts/softroce.sh makes the device or boots a VM with one):
# grex-info must list rxe0 with an ACTIVE port and a RoCE v2 GID and report
# dma-buf registration as unsupported (rxe has none); write_bw with two QPs,
# write_lat, send_bw for a duration and send_lat must each print their row.
# Exit status: 0 on success; 77 when no Soft-RoCE device can be made here.
#   perf_verbs_test.sh SOFTROCE_SH GREX_RUN GREX_PERF GREX_INFO
set -euo pipefail
(($# == 4)) || { echo "usage: perf_verbs_test.sh SOFTROCE_SH GREX_RUN GREX_PERF GREX_INFO" >&2; exit 2; }
softroce=$1
run=$(readlink -f "$2") perf=$(readlink -f "$3") info=$(readlink -f "$4")
inner='set -u
ulimit -l unlimited
run=$1 perf=$2 info=$3
fail() { echo "FAIL: $*"; exit 1; }
"$info" --backend verbs --json - >/tmp/grex-info.json || fail "grex-info --backend verbs exited $?"
python3 - /tmp/grex-info.json <<"PY" || fail "grex-info JSON"
import json, sys
v = json.load(open(sys.argv[1]))["verbs"]
assert v["usable"], v
dev = v["devices"][0]
port = dev["ports"][0]
assert port["state"] == "ACTIVE" and port["link_layer"] == "ethernet", port
assert any(g["type"] == "RoCE v2" and g["gid"].startswith("::ffff:") for g in port["gids"]), port["gids"]
assert dev["dma_buf"] == "not supported", dev["dma_buf"]
print("grex-info:", dev["name"], port["state"], port["active_mtu"], "dma-buf", dev["dma_buf"])
PY
export GREX_BACKEND=verbs
rows() { grep -cE "^ +$1 +[0-9]+ +[0-9.]+" /tmp/grex-perf.out || true; }
"$run" -n 2 --no-tag-output -- "$perf" write_bw -a -e 256K -n 50 -q 2 -R >/tmp/grex-perf.out || fail "write_bw"
[ "$(rows "[0-9]+")" -eq 18 ] || { cat /tmp/grex-perf.out; fail "write_bw: not 18 rows"; }
"$run" -n 2 --no-tag-output -- "$perf" write_lat -s 8 -n 200 >/tmp/grex-perf.out || fail "write_lat"
[ "$(rows 8)" -eq 1 ] || { cat /tmp/grex-perf.out; fail "write_lat: no row"; }
"$run" -n 2 --no-tag-output -- "$perf" send_bw -s 64K -D 0.5 -t 32 >/tmp/grex-perf.out || fail "send_bw -D"
[ "$(rows 65536)" -eq 1 ] || { cat /tmp/grex-perf.out; fail "send_bw: no row"; }
"$run" -n 2 --no-tag-output -- "$perf" send_lat -s 8 -n 200 >/tmp/grex-perf.out || fail "send_lat"
[ "$(rows 8)" -eq 1 ] || { cat /tmp/grex-perf.out; fail "send_lat: no row"; }
echo "perf_verbs: all passed"'
exec "$softroce" -- sh -c "$inner" sh "$run" "$perf" "$info"

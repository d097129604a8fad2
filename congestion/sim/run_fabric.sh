#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The leaf-spine fabric (issue 31) under training traffic: single-path (ECMP)
# against sprayed flows, RTTCC and DCQCN+ECN, on 4 leaves x 4 spines x 4 hosts
# at 100 Gbit/s (1:1), and the same with one spine failed at 0.1 ms. Prints a
# Markdown table: the collective's completion (the last flow's last byte),
# its goodput and the p99 queueing delay over every switch port.
#   ring:     host i sends FLOW_KB to host i+4 (a ring across leaves, as an allreduce's steps)
#   alltoall: every host sends FLOW_KB/16 to every other host
# Then a slow spine: 2 leaves x 4 spines x 4 hosts, spine 0 at 25 Gbit/s, the ring long-lived
# for 10 ms, with ECN: oblivious spraying (64 entropies) against REPS (--spray reps).
# Last, receiver credits (--credits) on 4 x 4 x 4, sprayed: an incast of 15 hosts into one
# (2 MB each) and the alltoall, against the controllers alone. Then a spine failing at 2 ms under
# the long-lived ring: how long until the delivered rate is back to 0.9 of what it was (or of what
# three spines carry, if less). Last, sprayed RTTCC with one controller per flow against one per
# path (--path-cc) on each of those patterns, and the spine failure under both.
# Usage: BUILD_DIR=build congestion/sim/run_fabric.sh     (env FLOW_KB=16000, PATHS=64, GBPS=100:
#        the links of the 4 x 4 x 4 tables but the long-lived ones; the others stay at 100)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-build}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
SIM=$BUILD_DIR/congestion/sim/grex-ccsim
FLOW_KB=${FLOW_KB:-16000} PATHS=${PATHS:-64} GBPS=${GBPS:-100}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fabric=(--topology leaf-spine --leaves 4 --spines 4 --hosts-per-leaf 4 --host-gbps "$GBPS" --spine-gbps "$GBPS"
  --duration-ms 100)
echo "| pattern | spine failed | cc | paths | completion (ms) | goodput (Gbit/s) | slowest flow (Gbit/s) | queue delay p99 (us) | trimmed |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
for pattern in ring alltoall; do
  kb=$FLOW_KB
  [[ $pattern == alltoall ]] && kb=$((FLOW_KB / 16))
  for fail in no yes; do
    extra=()
    [[ $fail == yes ]] && extra=(--fail-spine 1 --fail-at-ms 0.1)
    for cc in rttcc dcqcn; do
      ecn=()
      [[ $cc == dcqcn ]] && ecn=(--ecn)
      for paths in 1 "$PATHS"; do
        "$SIM" "${fabric[@]}" --pattern "$pattern" --flow-kb "$kb" --cc "$cc" "${ecn[@]}" --paths "$paths" \
          "${extra[@]}" --json "$tmp/r.json" > /dev/null
        python3 - "$tmp/r.json" "$pattern" "$fail" "$cc${ecn:+ + ECN}" "$paths" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
done = f"{d['completion_ms']:.3f}" if d['flows_done'] == d['flows'] else f"not done ({d['flows_done']}/{d['flows']})"
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | {done} | {d['goodput_gbps']:.0f} | "
      f"{d['per_flow_min_gbps']:.1f} | {d['queue_delay_us']['p99']:.2f} | {d['trimmed']} |")
PY
      done
    done
  done
done

echo
echo "| slow spine 0 (25 of 100 Gbit/s) | cc | spray | goodput (Gbit/s) | of the healthy sum | spine utilisation 0 / 1 / 2 / 3 | queue delay p99 (us) |"
echo "|---|---|---|---:|---:|---|---:|"
for cc in rttcc dcqcn; do
  for spray in oblivious reps; do
    "$SIM" --topology leaf-spine --leaves 2 --spines 4 --hosts-per-leaf 4 --pattern ring --ecn --cc "$cc" \
      --paths "$PATHS" --spray "$spray" --slow-spine 0 --slow-factor 0.25 --duration-ms 10 --json "$tmp/r.json" > /dev/null
    python3 - "$tmp/r.json" "$cc" "$spray" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
healthy = 2 * (3 * 100 + 25) * 4096 / 4160
u = " / ".join(f"{x:.2f}" for x in d['spine_utilization'])
print(f"| ring, 2 x 4 x 4 | {sys.argv[2]} + ECN | {sys.argv[3]} | {d['goodput_gbps']:.0f} | {d['goodput_gbps'] / healthy:.2f} | {u} | "
      f"{d['queue_delay_us']['p99']:.2f} |")
PY
  done
done

echo
echo "| pattern | cc | credits | completion (ms) | goodput (Gbit/s) | queue delay p99 (us) | trimmed |"
echo "|---|---|---|---:|---:|---:|---:|"
for pattern in incast alltoall; do
  kb=2000
  [[ $pattern == alltoall ]] && kb=$((FLOW_KB / 16))
  for v in "rttcc:" "dcqcn:--ecn" "none:--credits" "rttcc:--credits"; do
    cc=${v%%:*} flag=${v#*:}
    # shellcheck disable=SC2086  # the variant's flag splits on purpose
    "$SIM" "${fabric[@]}" --pattern "$pattern" --flow-kb "$kb" --cc "$cc" $flag --paths "$PATHS" \
      --json "$tmp/r.json" > /dev/null
    python3 - "$tmp/r.json" "$pattern" "$cc${flag:+ $flag}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cc = sys.argv[3].replace(" --credits", "").replace(" --ecn", " + ECN")
cr = "yes" if "--credits" in sys.argv[3] else "no"
done = f"{d['completion_ms']:.3f}" if d['flows_done'] == d['flows'] else f"not done ({d['flows_done']}/{d['flows']})"
print(f"| {sys.argv[2]} | {cc} | {cr} | {done} | {d['goodput_gbps']:.0f} | {d['queue_delay_us']['p99']:.2f} | {d['trimmed']} |")
PY
  done
done

echo
echo "| spine 1 fails at 2 ms (ring, long-lived, 4 x 4 x 4) | cc | paths | before (Gbit/s) | lowest 50 us after | level after | recovered in (ms) | trimmed |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for cc in rttcc dcqcn; do
  ecn=()
  [[ $cc == dcqcn ]] && ecn=(--ecn)
  for paths in 1 "$PATHS"; do
    "$SIM" --topology leaf-spine --leaves 4 --spines 4 --hosts-per-leaf 4 --pattern ring --cc "$cc" "${ecn[@]}" \
      --paths "$paths" --duration-ms 10 --warmup-ms 0.5 --fail-spine 1 --fail-at-ms 2 --json "$tmp/r.json" > /dev/null
    python3 - "$tmp/r.json" "$cc${ecn:+ + ECN}" "$paths" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rec = f"{d['recovery_ms']:.2f}" if d['recovery_ms'] > 0 else "never below the bar" if d['recovery_ms'] == 0 else "not in the run"
print(f"| | {sys.argv[2]} | {sys.argv[3]} | {d['before_fail_gbps']:.0f} | {d['dip_gbps']:.0f} | {d['after_fail_gbps']:.0f} | "
      f"{rec} | {d['trimmed']} |")
PY
  done
done

echo
echo "| RTTCC, sprayed over $PATHS entropies (4 x 4 x 4 unless shown) | controller | completion (ms) | goodput (Gbit/s) | of capacity | queue delay p99 (us) | trimmed |"
echo "|---|---|---:|---:|---:|---:|---:|"
scen=("ring, 16 MB a flow|${fabric[*]} --pattern ring --flow-kb $FLOW_KB|$((1575 * GBPS / 100))"
  "ring, 16 MB a flow, spine 1 fails at 0.1 ms|${fabric[*]} --pattern ring --flow-kb $FLOW_KB --fail-spine 1 --fail-at-ms 0.1|$((1181 * GBPS / 100))"
  "ring, long-lived, 20 ms|--topology leaf-spine --leaves 4 --spines 4 --hosts-per-leaf 4 --pattern ring --duration-ms 20|1575"
  "alltoall, 1 MB a pair|${fabric[*]} --pattern alltoall --flow-kb $((FLOW_KB / 16))|$((1575 * GBPS / 100))"
  "incast, 15 x 2 MB into one host|${fabric[*]} --pattern incast --flow-kb 2000|$(awk -v g="$GBPS" 'BEGIN { print 98.5 * g / 100 }')"
  "ring, 2 x 4 x 4, spine 0 at 25 of 100 Gbit/s, 10 ms|--topology leaf-spine --leaves 2 --spines 4 --hosts-per-leaf 4 --pattern ring --slow-spine 0 --slow-factor 0.25 --duration-ms 10|640")
for s in "${scen[@]}"; do
  IFS='|' read -r name args cap <<< "$s"
  for ctl in flow path; do
    flag=()
    [[ $ctl == path ]] && flag=(--path-cc)
    # shellcheck disable=SC2086  # the scenario's arguments split on purpose
    "$SIM" $args --cc rttcc --paths "$PATHS" "${flag[@]}" --json "$tmp/r.json" > /dev/null
    python3 - "$tmp/r.json" "$name" "$ctl" "$cap" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
done = "" if d['config']['flow_kb'] == 0 else f"{d['completion_ms']:.3f}" if d['flows_done'] == d['flows'] else "not done"
print(f"| {sys.argv[2]} | {'one per path' if sys.argv[3] == 'path' else 'the flow'} | {done} | {d['goodput_gbps']:.0f} | "
      f"{d['goodput_gbps'] / float(sys.argv[4]):.2f} | {d['queue_delay_us']['p99']:.2f} | {d['trimmed']} |")
PY
  done
done

echo
echo "| spine 1 fails at 2 ms (ring, long-lived, 4 x 4 x 4, RTTCC sprayed) | controller | before (Gbit/s) | lowest 50 us after | level after | recovered in (ms) | trimmed |"
echo "|---|---|---:|---:|---:|---:|---:|"
for ctl in flow path; do
  flag=()
  [[ $ctl == path ]] && flag=(--path-cc)
  "$SIM" --topology leaf-spine --leaves 4 --spines 4 --hosts-per-leaf 4 --pattern ring --cc rttcc --paths "$PATHS" \
    "${flag[@]}" --duration-ms 10 --warmup-ms 0.5 --fail-spine 1 --fail-at-ms 2 --json "$tmp/r.json" > /dev/null
  python3 - "$tmp/r.json" "$ctl" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rec = f"{d['recovery_ms']:.2f}" if d['recovery_ms'] > 0 else "never below the bar" if d['recovery_ms'] == 0 else "not in the run"
print(f"| | {'one per path' if sys.argv[2] == 'path' else 'the flow'} | {d['before_fail_gbps']:.0f} | {d['dip_gbps']:.0f} | "
      f"{d['after_fail_gbps']:.0f} | {rec} | {d['trimmed']} |")
PY
done

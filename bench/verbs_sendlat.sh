#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two-sided small messages over verbs against perftest on the same Soft-RoCE
# device, side by side in one run (REPEAT alternating runs; median, min-max):
#  - send_lat, half round trip t_typical, 8 B .. 16 KiB, vs ib_send_lat
#  - a 2-rank 8-byte allreduce (grex-perf allreduce, out-of-place time) vs
#    ib_send_lat's 8-byte t_typical (issue 24's goal: <= 1.3x)
# Outside a Soft-RoCE environment it re-runs itself under tests/scripts/softroce.sh
# (the qemu VM on kernels without rdma_rxe: TCG speeds, not NIC speeds).
# Commands (inside; DEV = $GREX_RXE_DEV, GID = $GREX_IB_GID_INDEX, IP = $GREX_RXE_IP):
#   ib_send_lat -d DEV -x GID -s S -n N & ib_send_lat -d DEV -x GID -s S -n N IP
#   grex-run -n 2 --backend verbs -- grex-perf send_lat -s S -n N
#   grex-run -n 2 --backend verbs -- grex-perf allreduce -b 8 -e 8 -n N -w 100
# With BASE=<another build dir> (an earlier commit's), its grex-perf runs too, alternating, as "before".
# Usage: bench/verbs_sendlat.sh     (root; env BUILD, BASE, REPEAT=3, ITERS=2000, SIZES="8 64 ...")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
BASE=${BASE:-}
[[ -z $BASE || $BASE = /* ]] || BASE=$ROOT/$BASE
if [[ -z ${GREX_RXE_DEV:-} ]]; then
  exec bash "$ROOT/tests/scripts/softroce.sh" --keep-cache -- \
    env BUILD="$BUILD" BASE="$BASE" REPEAT="${REPEAT:-3}" ITERS="${ITERS:-2000}" SIZES="${SIZES:-}" \
    bash "$ROOT/bench/verbs_sendlat.sh" "$@"
fi
REPEAT=${REPEAT:-3}
ITERS=${ITERS:-2000}
read -r -a sizes <<< "${SIZES:-8 64 512 1024 4096 16384}"
((${#sizes[@]})) || sizes=(8 64 512 1024 4096 16384)
DEV=$GREX_RXE_DEV GID=${GREX_IB_GID_INDEX:-1} IP=$GREX_RXE_IP
command -v ib_send_lat >/dev/null || { echo "verbs_sendlat: perftest missing (apt-get install perftest)" >&2; exit 1; }
ulimit -l unlimited
export GREX_LOG_LEVEL=error
stats() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.2f %.2f %.2f", a[int((NR+1)/2)], a[1], a[NR]}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=("$BUILD/apps/grex-run/grex-run" -n 2 --backend verbs --no-tag-output --)
perf=$BUILD/apps/grex-perf/grex-perf
port=18700
for ((r = 0; r < REPEAT; r++)); do
  for s in "${sizes[@]}"; do
    port=$((port + 1))
    # ib_send_lat row: #bytes #iterations t_min t_max t_typical t_avg ...
    ib_send_lat -d "$DEV" -x "$GID" -p "$port" -s "$s" -n "$ITERS" > /dev/null 2>&1 &
    spid=$!
    sleep 0.5
    timeout 60 ib_send_lat -d "$DEV" -x "$GID" -p "$port" -s "$s" -n "$ITERS" "$IP" 2>/dev/null |
      awk -v s="$s" '$1 == s {print s, $5}' >> "$tmp/pt" || true
    wait "$spid" 2>/dev/null || true
    timeout 120 "${run[@]}" "$perf" send_lat -s "$s" -n "$ITERS" 2>/dev/null |
      awk -v s="$s" '$1 == s {print s, $5}' >> "$tmp/gp" || true
    [[ -z $BASE ]] || timeout 120 "${run[@]}" "$BASE/apps/grex-perf/grex-perf" send_lat -s "$s" -n "$ITERS" \
      2>/dev/null | awk -v s="$s" '$1 == s {print s, $5}' >> "$tmp/bp" || true
  done
  timeout 120 "${run[@]}" "$perf" allreduce -b 8 -e 8 -n "$ITERS" -w 100 2>/dev/null |
    awk '$1 == 8 && NF >= 9 {print $5}' >> "$tmp/ar" || true
  [[ -z $BASE ]] || timeout 120 "${run[@]}" "$BASE/apps/grex-perf/grex-perf" allreduce -b 8 -e 8 -n "$ITERS" \
    -w 100 2>/dev/null | awk '$1 == 8 && NF >= 9 {print $5}' >> "$tmp/bar" || true
done
echo "| message (B) | grex-perf send_lat t_typical (us) | ib_send_lat t_typical (us) | grex / perftest (goal <= 1.1) | before (BASE) | before / perftest |"
echo "|---:|---:|---:|---:|---:|---:|"
for s in "${sizes[@]}"; do
  read -r gm gl gh <<< "$(awk -v s="$s" '$1 == s {print $2}' "$tmp/gp" | stats)"
  read -r pm pl ph <<< "$(awk -v s="$s" '$1 == s {print $2}' "$tmp/pt" | stats)"
  read -r bm bl bh <<< "$(awk -v s="$s" '$1 == s {print $2}' "$tmp/bp" 2>/dev/null | stats)"
  [[ -n ${gm:-} && -n ${pm:-} ]] || { echo "| $s | ${gm:-(none)} | ${pm:-(none)} | | | |"; continue; }
  before="| |"
  [[ -z ${bm:-} ]] || before=$(printf "| %.2f (%.2f-%.2f) | %.2f |" "$bm" "$bl" "$bh" "$(echo "$bm / $pm" | bc -l)")
  printf "| %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.2f %s\n" "$s" "$gm" "$gl" "$gh" "$pm" "$pl" "$ph" \
    "$(echo "$gm / $pm" | bc -l)" "$before"
done
read -r am al ah <<< "$(stats < "$tmp/ar")"
read -r pm _ _ <<< "$(awk -v s="${sizes[0]}" '$1 == s {print $2}' "$tmp/pt" | stats)"
if [[ -n ${am:-} && -n ${pm:-} ]]; then
  printf "\n| 2-rank %s-byte allreduce (us) | grex | ib_send_lat t_typical | grex / perftest (goal <= 1.3) |\n" \
    "${sizes[0]}"
  printf "|---|---:|---:|---:|\n| median (min-max) | %.2f (%.2f-%.2f) | %.2f | %.2f |\n" "$am" "$al" "$ah" "$pm" \
    "$(echo "$am / $pm" | bc -l)"
  read -r bm bl bh <<< "$(stats < "$tmp/bar" 2>/dev/null)"
  [[ -z ${bm:-} ]] || printf "| before (BASE) | %.2f (%.2f-%.2f) | %.2f | %.2f |\n" "$bm" "$bl" "$bh" "$pm" \
    "$(echo "$bm / $pm" | bc -l)"
fi
echo "# on $DEV ($GREX_SOFTROCE), $REPEAT alternating runs of $ITERS iterations"

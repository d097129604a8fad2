#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two-sided small messages over verbs against perftest on the same Soft-RoCE
# device (REPEAT rounds; median, min-max):
#  - send_lat, half round trip t_typical, for each size in SIZES, vs ib_send_lat
#  - a 2-rank 8-byte allreduce (grex-perf allreduce, out-of-place time) vs
#    ib_send_lat's 8-byte t_typical (issue 24's goal: <= 1.3x)
#  - the raw-verbs floor (bench/verbs_exchange, in the perftest guest): an 8-byte
#    ping-pong and a crossing exchange (both send at once, as a 2-rank allreduce's
#    step), and grex's send_lat and allreduce over them
# With BASE=<another build dir> (an earlier commit's), its grex-perf runs too, as "before".
# Each round boots one fresh guest per tool (grex, BASE, perftest), in turn: in
# the TCG guest, once perftest has run, every later grex run in the same guest
# took ~1.7x longer (64 vs 37 us at 8 B, reproducible by order alone), so tools
# never share a guest. Outside a Soft-RoCE environment it runs itself under
# tests/scripts/softroce.sh (the qemu VM on kernels without rdma_rxe: TCG speeds).
# Commands (inside; DEV = $GREX_RXE_DEV, GID = $GREX_IB_GID_INDEX, IP = $GREX_RXE_IP):
#   ib_send_lat -d DEV -x GID -s S -n N & ib_send_lat -d DEV -x GID -s S -n N IP
#   grex-perf send_lat -s S -n N & grex-perf send_lat -s S -n N IP        (GREX_BACKEND=verbs)
#   grex-run -n 2 --backend verbs -- grex-perf allreduce -b 8 -e 8 -n N -w 100
# Usage: bench/verbs_sendlat.sh     (root; env BUILD, BASE, REPEAT=3, ITERS=5000, SIZES="8 64 ...")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
BASE=${BASE:-}
[[ -z $BASE || $BASE = /* ]] || BASE=$ROOT/$BASE
REPEAT=${REPEAT:-3}
ITERS=${ITERS:-5000}
SIZES=${SIZES:-8 64 512 1024 4096 16384}
read -r -a sizes <<< "$SIZES"

if [[ ${1:-} == --guest ]]; then  # inside one guest: one tool, every size, one line each
  tool=$2
  FLOOR=${3:-}
  DEV=$GREX_RXE_DEV GID=${GREX_IB_GID_INDEX:-1} IP=$GREX_RXE_IP
  ulimit -l unlimited
  export GREX_LOG_LEVEL=error GREX_BACKEND=verbs
  port=18700
  if [[ $tool == perftest ]]; then  # first: nothing has run in this guest yet
    # The raw-verbs floor of the same exchanges (bench/verbs_exchange.c, nothing of grex):
    # ping-pong (as ib_send_lat) and both sides sending at once (a 2-rank allreduce's step).
    for m in pingpong cross; do
      port=$((port + 1))
      cmd=("$FLOOR" -d "$DEV" -x "$GID" -p "$port" -s 8 -n "$ITERS" -m "$m")
      timeout 60 "${cmd[@]}" > /dev/null 2>&1 &
      sleep 1.5
      timeout 60 "${cmd[@]}" "$IP" 2>/dev/null | awk '{print "raw", $1, $5}' || true
      wait || true
    done
  fi
  for s in "${sizes[@]}"; do
    port=$((port + 1))
    case $tool in
      perftest) cmd=(ib_send_lat -d "$DEV" -x "$GID" -p "$port" -s "$s" -n "$ITERS") ;;
      *) cmd=("$tool/apps/grex-perf/grex-perf" send_lat -p "$port" -s "$s" -n "$ITERS") ;;
    esac
    # The server gives up by itself when its client never came (a busy guest can be slow to listen).
    timeout 60 "${cmd[@]}" > /dev/null 2>&1 &
    sleep 1.5
    # Both tables: #bytes #iterations t_min t_max t_typical ...
    timeout 60 "${cmd[@]}" "$IP" 2>/dev/null | awk -v s="$s" '$1 == s {print "lat", s, $5}' || true
    wait || true
  done
  if [[ $tool != perftest ]]; then
    timeout 120 "$tool/apps/grex-run/grex-run" -n 2 --backend verbs --no-tag-output -- \
      "$tool/apps/grex-perf/grex-perf" allreduce -b 8 -e 8 -n "$ITERS" -w 100 2>/dev/null |
      awk '$1 == 8 && NF >= 9 {print "ar", 8, $5}' || true
  fi
  exit 0
fi

command -v ib_send_lat >/dev/null || { echo "verbs_sendlat: perftest missing (apt-get install perftest)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tools=(grex "$BUILD" perftest perftest)
[[ -z $BASE ]] || tools+=(base "$BASE")
guest() {  # NAME TOOL: one fresh guest
  SIZES="$SIZES" ITERS="$ITERS" bash "$ROOT/tests/scripts/softroce.sh" --keep-cache -- \
    env SIZES="$SIZES" ITERS="$ITERS" bash "$ROOT/bench/verbs_sendlat.sh" --guest "$2" "$BUILD/bench/verbs_exchange" 2>/dev/null |
    grep -E '^(lat|ar|raw) ' | sed "s/^/$1 /" >> "$tmp/all" || true
}
for ((r = 0; r < REPEAT; r++)); do
  for ((t = 0; t < ${#tools[@]}; t += 2)); do
    guest "${tools[t]}" "${tools[t + 1]}"
    echo "verbs_sendlat: round $((r + 1))/$REPEAT: ${tools[t]} done" >&2
  done
done
stats() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.2f %.2f %.2f", a[int((NR+1)/2)], a[1], a[NR]}'; }
pick() { awk -v n="$1" -v k="$2" -v s="$3" '$1 == n && $2 == k && $3 == s {print $4}' "$tmp/all" | stats; }
echo "| message (B) | grex-perf send_lat t_typical (us) | ib_send_lat t_typical (us) | grex / perftest (goal <= 1.1) | before (BASE) | before / perftest |"
echo "|---:|---:|---:|---:|---:|---:|"
for s in "${sizes[@]}"; do
  read -r gm gl gh <<< "$(pick grex lat "$s")"
  [[ $s != 8 ]] || gm8=${gm:-}
  read -r pm pl ph <<< "$(pick perftest lat "$s")"
  read -r bm bl bh <<< "$(pick base lat "$s")"
  [[ -n ${gm:-} && -n ${pm:-} ]] || { echo "| $s | ${gm:-(none)} | ${pm:-(none)} | | | |"; continue; }
  before="| |"
  [[ -z ${bm:-} ]] || before=$(printf "| %.2f (%.2f-%.2f) | %.2f |" "$bm" "$bl" "$bh" "$(echo "$bm / $pm" | bc -l)")
  printf "| %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.2f %s\n" "$s" "$gm" "$gl" "$gh" "$pm" "$pl" "$ph" \
    "$(echo "$gm / $pm" | bc -l)" "$before"
done
read -r am al ah <<< "$(pick grex ar 8)"
read -r pm _ _ <<< "$(pick perftest lat 8)"
if [[ -n ${am:-} && -n ${pm:-} ]]; then
  printf "\n| 2-rank 8-byte allreduce (us) | grex | ib_send_lat 8 B t_typical | grex / perftest (goal <= 1.3) |\n"
  printf "|---|---:|---:|---:|\n| median (min-max) | %.2f (%.2f-%.2f) | %.2f | %.2f |\n" "$am" "$al" "$ah" "$pm" \
    "$(echo "$am / $pm" | bc -l)"
  read -r bm bl bh <<< "$(pick base ar 8)"
  [[ -z ${bm:-} ]] || printf "| before (BASE) | %.2f (%.2f-%.2f) | %.2f | %.2f |\n" "$bm" "$bl" "$bh" "$pm" \
    "$(echo "$bm / $pm" | bc -l)"
fi
read -r rpm rpl rph <<< "$(pick perftest raw pingpong)"
read -r rcm rcl rch <<< "$(pick perftest raw cross)"
if [[ -n ${rpm:-} && -n ${rcm:-} ]]; then
  printf "\n| raw verbs floor, 8 B (us) | median (min-max) | / ib_send_lat | grex over it |\n|---|---:|---:|---:|\n"
  printf "| ping-pong, half round trip | %.2f (%.2f-%.2f) | %.2f | send_lat %.2f |\n" "$rpm" "$rpl" "$rph" \
    "$(echo "$rpm / $pm" | bc -l)" "$(echo "${gm8:-0} / $rpm" | bc -l)"
  printf "| crossing exchange | %.2f (%.2f-%.2f) | %.2f | allreduce %.2f |\n" "$rcm" "$rcl" "$rch" \
    "$(echo "$rcm / $pm" | bc -l)" "$(echo "${am:-0} / $rcm" | bc -l)"
fi
echo "# Soft-RoCE in a TCG guest (tests/scripts/softroce.sh), $REPEAT rounds of $ITERS iterations, a fresh guest per tool"

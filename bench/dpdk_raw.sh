#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Raw DPDK throughput over memif: one receiver (lcore 0) and one burst sender
# (lcore 1, bursts of 32) per frame size, measured at the receiver. memif's
# bsize is set above the frame size by dpdk_raw itself (frames spanning memif
# buffers get corrupted). Builds nothing: expects a built build dir with DPDK
# (default build-dpdk/; BUILD=... to use another). Commands, per size S:
#
#   $BUILD/bench/dpdk_raw --role server --socket DIR/memif.sock --size S --seconds T --lcore 0 &
#   $BUILD/bench/dpdk_raw --role client --socket DIR/memif.sock --size S --lcore 1
#
# ZERO_COPY=1: the receiver is memif's client in zero-copy mode (needs free
# hugepages; both run with GREX_DPDK_HUGE=1), so the sender starts first.
# RSIZE=N passes memif rsize=N (log2 ring slots) to both.
#
# Each size runs REPEAT times (default 3); the table gives the median and the
# best run: on a 2-core machine anything else running steals a polling core.
#
# Usage: bench/dpdk_raw.sh [SECONDS] [SIZES...]   (default 3 s; 1500 4096 8192 9000)
#        env: BUILD, REPEAT (3), SERVER_LCORE (0), CLIENT_LCORE (1), ZERO_COPY (0), RSIZE
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build-dpdk}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
RAW=$BUILD/bench/dpdk_raw
[[ -x $RAW ]] || { echo "dpdk_raw.sh: $RAW is missing; build $BUILD with DPDK first (ninja -C $BUILD)" >&2; exit 1; }

SECONDS_PER_SIZE=${1:-3}
shift || true
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(1500 4096 8192 9000)
SERVER_LCORE=${SERVER_LCORE:-0}
CLIENT_LCORE=${CLIENT_LCORE:-1}
REPEAT=${REPEAT:-3}
ZERO_COPY=${ZERO_COPY:-0}
EXTRA=(--zero-copy "$ZERO_COPY")
[[ -n ${RSIZE:-} ]] && EXTRA+=(--rsize "$RSIZE")
if [[ $ZERO_COPY = 1 ]]; then
  free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
  [[ ${free:-0} -gt 0 ]] || { echo "dpdk_raw.sh: ZERO_COPY=1 needs free hugepages (echo 256 > /proc/sys/vm/nr_hugepages)" >&2; exit 1; }
  export GREX_DPDK_HUGE=1
fi

DIR=$(mktemp -d /tmp/grex-dpdk-raw-XXXXXX)
server_pid=
# shellcheck disable=SC2317  # runs from the trap
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

echo "# grex dpdk_raw: memif$([[ $ZERO_COPY = 1 ]] && echo ' zero-copy')${RSIZE:+ rsize $RSIZE}, receiver lcore $SERVER_LCORE, sender lcore $CLIENT_LCORE, ${SECONDS_PER_SIZE} s per run," \
     "$REPEAT runs per size, $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| frame (B) | Mpps (median) | Gbit/s (median) | Gbit/s (best) | runs (Gbit/s) |"
echo "|---:|---:|---:|---:|---|"

# run_once SIZE -> prints "frame_bytes pps gbit_per_s" from the receiver, or fails.
run_once() {
  local size=$1 sock=$DIR/memif.sock ok=1 client_pid=
  if [[ $ZERO_COPY = 1 ]]; then
    # The sender serves memif's socket here: it starts first.
    "$RAW" --role client --socket "$sock" --size "$size" --lcore "$CLIENT_LCORE" "${EXTRA[@]}" \
      2>"$DIR/client.err" &
    client_pid=$!
    sleep 0.3
  fi
  "$RAW" --role server --socket "$sock" --size "$size" --seconds "$SECONDS_PER_SIZE" --lcore "$SERVER_LCORE" \
    "${EXTRA[@]}" >"$DIR/server.out" 2>"$DIR/server.err" &
  server_pid=$!
  if [[ -n $client_pid ]]; then
    wait "$client_pid" || { echo "dpdk_raw.sh: client failed at $size B:" >&2; cat "$DIR/client.err" >&2; ok=0; }
  else
    sleep 0.3  # the server listens before the client connects
    if ! "$RAW" --role client --socket "$sock" --size "$size" --lcore "$CLIENT_LCORE" "${EXTRA[@]}" \
      2>"$DIR/client.err"; then
      echo "dpdk_raw.sh: client failed at $size B:" >&2
      cat "$DIR/client.err" >&2
      ok=0
    fi
  fi
  if ! wait "$server_pid"; then
    echo "dpdk_raw.sh: server failed at $size B:" >&2
    cat "$DIR/server.err" >&2
    ok=0
  fi
  server_pid=
  [[ $ok = 1 ]] && cat "$DIR/server.out"
}

status=0
for size in "${SIZES[@]}"; do
  : >"$DIR/runs"
  for ((r = 0; r < REPEAT; r++)); do
    run_once "$size" >>"$DIR/runs" || status=1
  done
  if [[ ! -s $DIR/runs ]]; then
    echo "| $size | - | - | - | failed |"
    continue
  fi
  sort -k3,3g "$DIR/runs" | awk '
    { pps[NR] = $2; gbit[NR] = $3; bytes = $1; all = all (NR > 1 ? ", " : "") sprintf("%.1f", $3) }
    END {
      m = int((NR + 1) / 2)
      printf "| %d | %.2f | %.1f | %.1f | %s |\n", bytes, pps[m] / 1e6, gbit[m], gbit[NR], all
    }'
done
exit $status

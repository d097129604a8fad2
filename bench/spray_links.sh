#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 31: grex's dpdk flow over the equal-cost links of a routed fabric
# between two network namespaces (tests/scripts/netns_ecmp.sh), one link slow:
# one path vs round-robin spraying vs REPS spraying over PATHS source ports,
# alternating, REPEAT rounds; prints each variant's Gbit/s (median, min-max)
# and the links' shares of the bytes in its median round.
#
#   sudo bash bench/spray_links.sh [BUILD_DIR]
#   env: LINKS (3), RATE_MBIT (300), SLOW_MBIT (40; 0: every link healthy), ECMP_CC (none),
#        PATHS (16), REPEAT (3), MESSAGES (200 x 1 MiB per run), ECMP_WINDOW (128), ECMP_MTU (9000)
# With a controller (ECMP_CC=rttcc, ...), rr+path and reps+path run too: the
# same sprays with a controller per path (GREX_DPDK_PATH_CC=path).
set -u
build=${1:-build}
perf=$(readlink -f "$build/apps/grex-perf/grex-perf")
store=$(readlink -f "$build/apps/grex-store/grex-store")
[[ -x $perf && -x $store ]] || { echo "build grex first (no $build/apps/grex-perf/grex-perf)"; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)"; exit 2; }
links=${LINKS:-3} rate=${RATE_MBIT:-300} slow=${SLOW_MBIT:-40} paths=${PATHS:-16} repeat=${REPEAT:-3}
messages=${MESSAGES:-200}

# shellcheck source=../tests/scripts/netns_ecmp.sh
source "$(dirname "$0")/../tests/scripts/netns_ecmp.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grex-spray.XXXXXX")
pids=()
# shellcheck disable=SC2317  # invoked through the trap
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill -TERM "$p" 2>/dev/null; done
  ecmp_teardown
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

slow_arg=()
((slow > 0)) && slow_arg=("$slow")
ecmp_setup "$links" "$rate" "${slow_arg[@]}" || { echo "could not build the fabric"; exit 1; }
healthy=$((slow > 0 ? (links - 1) * rate : links * rate))
echo "# $links links of $rate Mbit/s$( ((slow > 0)) && echo ", link 0 at $slow") (healthy sum $healthy Mbit/s);" \
  "$paths source ports; window ${ECMP_WINDOW:-128}; MTU ${ECMP_MTU:-9000}; $repeat rounds of $messages x 1 MiB"
variants=(single rr reps)
[[ ${ECMP_CC:-none} != none ]] && variants+=(rr+path reps+path)
declare -A runs share_of
for ((i = 0; i < repeat; ++i)); do
  for v in "${variants[@]}"; do
    p=$paths s=${v%+path} pc=flow
    [[ $v == single ]] && p=1 s=rr
    [[ $v == *+path ]] && pc=path
    if GREX_DPDK_PATH_CC=$pc ecmp_stream "$v$i" "$p" "$s" "$messages"; then
      runs[$v]+="$gbps "
      share_of[$v$gbps]=$shares
      echo "round $i $v: $gbps Gbit/s, link shares $shares"
    else
      echo "round $i $v: failed"
    fi
  done
done
printf '%-10s %-10s %-14s %-10s %s\n' variant median min-max of_healthy "link shares (median round)"
for v in "${variants[@]}"; do
  read -r med lo hi <<<"$(tr ' ' '\n' <<<"${runs[$v]:-}" | sed '/^$/d' | sort -g |
    awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)], a[1], a[NR]; else print 0, 0, 0 }')"
  printf '%-10s %-10s %-14s %-10s %s\n' "$v" "$med" "$lo-$hi" \
    "$(awk -v g="$med" -v h="$healthy" 'BEGIN { printf "%.2f", 1000 * g / h }')" "${share_of[$v$med]:-}"
done

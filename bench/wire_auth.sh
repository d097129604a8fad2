#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What each wire authentication mode of the dpdk driver costs (issue 28), side
# by side in one run: REPEAT alternating rounds of every mode, medians with
# min-max. Per mode, over memif between two ranks of this host:
#   goodput of 8 KiB and 1 MiB messages (64 in flight, at most 16 MiB), the
#   8-byte half round trip posting each receive as the loop needs it (lat), and
#   with the receives posted ahead as ib_send_lat does (plat), from
#   GREX_WIRE_AUTH=M grex-run -n 2 --backend dpdk -- $BUILD/bench/transport_bw -s 8K -s 1M -t 64 -B 16M -d 2 -l 20000
#   (aes-gcm: GREX_WIRE_AUTH=full GREX_WIRE_CRYPT=aes-gcm)
# and one core's raw OpenSSL AES-128-GCM on 8832-byte packets
# ($BUILD/bench/aes_gcm_loop 8832 1), the limit of aes-gcm.
# Usage: bench/wire_auth.sh   (env: BUILD=build, REPEAT=3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
REPEAT=${REPEAT:-3}
RUN="$BUILD/apps/grex-run/grex-run -n 2 --backend dpdk --no-tag-output --"
export GREX_LOG_LEVEL=error
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
modes=(off control headers full aes-gcm)
for ((r = 0; r < REPEAT; r++)); do
  for m in "${modes[@]}"; do
    if [[ $m == aes-gcm ]]; then env_m=(GREX_WIRE_AUTH=full GREX_WIRE_CRYPT=aes-gcm); else env_m=(GREX_WIRE_AUTH=$m); fi
    env "${env_m[@]}" $RUN "$BUILD/bench/transport_bw" -s 8K -s 1M -t 64 -B 16M -d 2 -l 20000 2>/dev/null |
      awk -v m="$m" '$1 == "bw" { print m, "bw" $2, $3 } $1 == "lat" || $1 == "plat" { print m, $1, $3 }' >> "$tmp/runs"
  done
  "$BUILD/bench/aes_gcm_loop" 8832 1 >> "$tmp/raw"
done
stat() {  # MODE KEY -> "median (min–max)"
  awk -v m="$1" -v k="$2" '$1 == m && $2 == k { print $3 }' "$tmp/runs" | sort -g |
    awk '{ a[NR] = $1 } END { if (NR) printf "%s (%s–%s)", a[int((NR + 1) / 2)], a[1], a[NR]; else printf "-" }'
}
med() { awk -v m="$1" -v k="$2" '$1 == m && $2 == k { print $3 }' "$tmp/runs" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "| mode | 8 KiB goodput (Gbit/s) | 1 MiB goodput (Gbit/s) | 8 B half round trip (us) | same, receives posted ahead (us) | 1 MiB vs off | latency vs off | posted ahead vs off |"
echo "|---|---|---|---|---|---|---|---|"
off_bw=$(med off bw1048576)
off_lat=$(med off lat)
off_plat=$(med off plat)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
for m in "${modes[@]}"; do
  echo "| $m | $(stat "$m" bw8192) | $(stat "$m" bw1048576) | $(stat "$m" lat) | $(stat "$m" plat) |" \
    "$(ratio "$(med "$m" bw1048576)" "$off_bw") | $(ratio "$(med "$m" lat)" "$off_lat") | $(ratio "$(med "$m" plat)" "$off_plat") |"
done
echo
echo "raw OpenSSL AES-128-GCM and grex's tags (grex-*), one core, 8832-byte packets (median of $REPEAT):"
for k in header-tag gmac aes-gcm grex-header-seal grex-header-seal-open grex-header-codec grex-header-codec-crc \
  grex-full-seal; do
  awk -v k="$k" '$1 == k { print $3, $4 }' "$tmp/raw" | sort -g | awk -v k="$k" '{ a[NR] = $0 } END { split(a[int((NR + 1) / 2)], x, " "); printf "  %s: %s ns per packet, %s Gbit/s of payload\n", k, x[1], x[2] }'
done

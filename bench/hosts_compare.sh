#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One job across two "hosts" (network namespaces on a bridge, 2 ranks each):
# float-sum allreduce, 1 MiB to 256 MiB, side by side in one run, alternating:
#   grex hier   GREX_BACKEND=auto: shm inside a host, DPDK af_packet (MTU 9000,
#               one port per local rank) between hosts; the model's choice
#               (hierarchical at these sizes)
#   grex flat   GREX_BACKEND=dpdk and a host id per rank (no levels): every
#               pair over the af_packet ports, the model's flat algorithm
#   Gloo        tcp over the same veths (each rank bound to its port's kernel
#               address; one /16, so a host's kernel traffic leaves through
#               d0), a FileStore in a shared directory; ring and
#               halving-doubling, the faster per size
#   Open MPI    mpirun with an rsh agent that runs `ip netns exec HOST`: vader
#               inside a host, tcp between hosts over the same veths
# Each reports the slowest rank's average time per call (out of place); the
# table shows each one's median over ROUNDS rounds with min-max, and the
# ratios of grex hier's median to the others'. Also prints, per rank, the
# bytes grex sent across hosts in one call of each size (CommStats).
#
# Usage: bench/hosts_compare.sh      (env: BUILD=build, ROUNDS=3, SIZES="1M 4M 16M 64M 256M",
#                                   MTU=9000 or 64000 for every link)
# COMPRESS=bf16|fp16|int8|topk instead compares grex hier with itself compressed
# (grex-perf --compress: float32 sums inside a host, the format between hosts);
# no peers run then.
# AGAINST=DIR instead compares grex hier with itself on the libgrex.so.0 in DIR
# (an older build's, by LD_LIBRARY_PATH under the same binaries), alternating
# round by round; no peers run then. With COMPRESS too, both run compressed.
# ENV_A="VAR=V ..." ENV_B="..." instead compares grex hier under two sets of
# environment variables, each run with grex-perf's extra options PERF_EXTRA
# (e.g. "--compress topk" with GREX_TOPK=flat and =hierarchical).
# Needs root, iproute2, a build with DPDK and bench/gloo_allreduce, mpicc and mpirun.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-"1M 4M 16M 64M 256M"}
MTU=${MTU:-9000}
PERF=$BUILD/apps/grex-perf/grex-perf
STORE=$BUILD/apps/grex-store/grex-store
GLOO=$BUILD/bench/gloo_allreduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

die() { echo "hosts_compare.sh: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
for f in "$PERF" "$STORE" "$GLOO"; do [[ -x $f ]] || die "$f is missing; build $BUILD first"; done
command -v mpicc >/dev/null && command -v mpirun >/dev/null || die "mpicc/mpirun not found (apt-get install libopenmpi-dev openmpi-bin)"

# Every link (grex's ports, Gloo's and Open MPI's TCP) at the same MTU. The
# af_packet ring's frames must hold a frame; an MTU above 9000 (veths and
# bridges take up to 65535; grex's mbufs hold 65258) needs 63 KiB frames (the PMD places frame i at i x framesz, so blocksz
# must be a multiple of framesz).
case $MTU in
  9000) framing="framesz=10240,blocksz=20480,framecnt=512" ;;
  64000) framing="framesz=64512,blocksz=258048,framecnt=256" ;;
  *) die "MTU=$MTU: use 9000 or 64000" ;;
esac
export HOSTS_MTU=$MTU
# shellcheck source=../tests/scripts/netns_hosts.sh
source "$ROOT/tests/scripts/netns_hosts.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grex-hosts-bench.XXXXXX")
cleanup() { hosts_teardown; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

hosts_setup 2 2 10.96.0.254/24 || die "could not create the namespaces"
mpicc -O2 -o "$tmp/mpi_allreduce" "$ROOT/bench/mpi_allreduce.c" || die "mpicc failed"
# Open MPI's rsh agent: start the command inside the host's namespace, with a
# hostname of its own (one shared hostname makes Open MPI's session dirs collide).
cat >"$tmp/agent" <<'EOF'
#!/bin/sh
h=$1
shift
exec ip netns exec "$h" unshare --uts sh -c "hostname $h; $*"
EOF
chmod +x "$tmp/agent"

ranks=4
ncpu=$(nproc)
# iterations per size: more for small vectors
iters_for() {
  case $1 in
    1M | 2M) echo "20 3" ;;
    4M | 8M) echo "10 2" ;;
    16M | 32M) echo "5 1" ;;
    *) echo "3 1" ;;
  esac
}

# grex VARIANT SIZE: prints "time_us inter_host_bytes" (rank 0's view of the slowest rank's time).
grex() {
  local variant=$1 size=$2 n w token port store_pid h i r=0 pids=()
  read -r n w <<<"$(iters_for "$size")"
  token="bench-$$-$RANDOM"
  hosts_start_store "$STORE" "$token" "$tmp/store.log" 600 >&2 || { echo "nan nan"; return; }
  port=$store_port
  local backend=auto extra=() libenv=()
  [[ $variant == flat ]] && backend=dpdk
  [[ $variant == against* ]] && libenv=("LD_LIBRARY_PATH=$AGAINST")
  [[ $variant == *-* ]] && extra=(--compress "${variant#*-}")
  if [[ $variant == env[AB] ]]; then  # ENV_A / ENV_B mode (below)
    local e=ENV_${variant#env}
    read -r -a libenv <<<"${!e}"
    read -r -a extra <<<"${PERF_EXTRA:-}"
  fi
  for ((h = 0; h < 2; ++h)); do
    for ((i = 0; i < 2; ++i, ++r)); do
      GREX_RANK=$r GREX_WORLD_SIZE=$ranks GREX_JOB_TOKEN=$token GREX_STORE_ADDR=10.96.0.1:$port \
        GREX_STORE_EXTERNAL=1 GREX_BACKEND=$backend GREX_NET=dpdk GREX_DPDK_MODE=port \
        GREX_HOST_ID="$([[ $variant == flat ]] && echo "flat-rank-$r")" \
        GREX_DPDK_PORT="net_af_packet$i,iface=d$i,$framing" \
        GREX_DPDK_IP="10.97.$h.$((i + 1))" GREX_DPDK_MTU=$MTU GREX_DPDK_LCORE=$((r % ncpu)) \
        env "${libenv[@]}" timeout 300 ip netns exec "$(host_ns "$h")" "$PERF" allreduce -b "$size" -e "$size" -n "$n" -w "$w" -c 0 \
        --inplace 0 "${extra[@]}" --json "$tmp/grex.r$r.json" >"$tmp/grex.r$r.log" 2>&1 &
      pids+=($!)
    done
  done
  local ok=1
  for r in "${!pids[@]}"; do wait "${pids[r]}" || ok=0; done
  kill "$store_pid" 2>/dev/null
  wait "$store_pid" 2>/dev/null
  if ((!ok)); then
    echo "grex $variant $size failed:" >&2
    tail -n 5 "$tmp"/grex.r*.log >&2
    echo "nan nan"
    return
  fi
  local t
  t=$(awk '/^ *[0-9]/ { print $5 }' "$tmp/grex.r0.log" | head -n 1)
  # bytes rank 0 sent across hosts per call (the mode's calls: warmup + timed)
  python3 - "$tmp/grex.r0.json" "$t" $((n + w)) <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], int(d["bytes_inter_host"]) // int(sys.argv[3]))
EOF
}

# gloo ALGO SIZE: prints time_us.
gloo() {
  local algo=$1 size=$2 n w h i r=0 pids=() dir
  read -r n w <<<"$(iters_for "$size")"
  dir=$(mktemp -d "$tmp/gloo.XXXXXX")
  for ((h = 0; h < 2; ++h)); do
    for ((i = 0; i < 2; ++i, ++r)); do
      timeout 300 ip netns exec "$(host_ns "$h")" "$GLOO" --rank $r --size $ranks --store "$dir" \
        --host "10.97.$h.$((i + 1))" --algo "$algo" -n "$n" -w "$w" "$size" >"$tmp/gloo.r$r.log" 2>&1 &
      pids+=($!)
    done
  done
  local ok=1
  for r in "${!pids[@]}"; do wait "${pids[r]}" || ok=0; done
  if ((!ok)); then
    echo "gloo $algo $size failed:" >&2
    tail -n 3 "$tmp"/gloo.r*.log >&2
    echo nan
    return
  fi
  awk '!/^#/ && NF == 2 { print $2 }' "$tmp/gloo.r0.log" | head -n 1
}

# ompi SIZE: prints time_us.
ompi() {
  local size=$1 n w
  read -r n w <<<"$(iters_for "$size")"
  timeout 300 mpirun -H "$(host_ns 0):2,$(host_ns 1):2" -np $ranks --bind-to none \
    --mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 --mca btl vader,tcp,self \
    --mca btl_tcp_if_include 10.97.0.0/16 --mca oob_tcp_if_include 10.96.0.0/24 \
    "$tmp/mpi_allreduce" -n "$n" -w "$w" "$size" >"$tmp/ompi.log" 2>&1 || {
    echo "ompi $size failed:" >&2
    tail -n 5 "$tmp/ompi.log" >&2
    echo nan
    return
  }
  awk 'NF == 2 && $1 ~ /^[0-9]+$/ { print $2 }' "$tmp/ompi.log" | head -n 1
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
span() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f-%.0f", lo, hi }'; }
fmt() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }

# alternate A B: grex variant A against variant B, no peers, A then B in each
# round; per size the medians (min-max), B/A, and the bytes across hosts.
alternate() {
  local a=$1 b=$2 size k t bytes ma mb
  for size in $SIZES; do
    declare -a ta=() tb=() ba=() bb=()
    for ((k = 0; k < ROUNDS; ++k)); do
      read -r t bytes <<<"$(grex "$a" "$size")"
      ta+=("$t") ba+=("$bytes")
      read -r t bytes <<<"$(grex "$b" "$size")"
      tb+=("$t") bb+=("$bytes")
    done
    ma=$(printf '%s\n' "${ta[@]}" | median)
    mb=$(printf '%s\n' "${tb[@]}" | median)
    printf '| %s | %s (%s) | %s (%s) | %.2f | %s / %s |\n' "$size" "$(fmt "$ma")" "$(printf '%s\n' "${ta[@]}" | span)" \
      "$(fmt "$mb")" "$(printf '%s\n' "${tb[@]}" | span)" "$(awk -v x="$mb" -v y="$ma" 'BEGIN { print x / y }')" \
      "${ba[0]}" "${bb[0]}"
  done
}
if [[ -n ${ENV_A+x} || -n ${ENV_B+x} ]]; then
  echo "# allreduce f32 sum, 2 hosts (network namespaces on a bridge) x 2 ranks, $(nproc) cores; grex hier with '${ENV_A:-}' vs '${ENV_B:-}', grex-perf ${PERF_EXTRA:-}; median of $ROUNDS alternating rounds (min-max), us"
  alternate envA envB
  echo "# columns: size | ENV_A | ENV_B | B/A | bytes across hosts per call, rank 0: A / B"
  exit 0
fi
if [[ -n ${COMPRESS:-} && -n ${AGAINST:-} ]]; then
  [[ -e $AGAINST/libgrex.so.0 ]] || die "AGAINST=$AGAINST holds no libgrex.so.0"
  echo "# allreduce f32 sum, 2 hosts (network namespaces on a bridge) x 2 ranks, $(nproc) cores; grex --compress $COMPRESS, this build's library vs $AGAINST's; median of $ROUNDS alternating rounds (min-max), us"
  alternate "against-$COMPRESS" "hier-$COMPRESS"
  echo "# columns: size | AGAINST's library | this build's | this/AGAINST | bytes across hosts per call, rank 0: AGAINST's / this build's"
  exit 0
fi
if [[ -n ${COMPRESS:-} ]]; then
  echo "# allreduce f32 sum, 2 hosts (network namespaces on a bridge) x 2 ranks, $(nproc) cores; grex hier float32 vs $COMPRESS between hosts; median of $ROUNDS alternating rounds (min-max), us"
  alternate hier "hier-$COMPRESS"
  echo "# columns: size | grex hier float32 | grex hier $COMPRESS | $COMPRESS/float32 | bytes across hosts per call, rank 0: float32 / $COMPRESS"
  exit 0
fi
if [[ -n ${AGAINST:-} ]]; then
  [[ -e $AGAINST/libgrex.so.0 ]] || die "AGAINST=$AGAINST holds no libgrex.so.0"
  echo "# allreduce f32 sum, 2 hosts (network namespaces on a bridge) x 2 ranks, $(nproc) cores; grex hier, this build's library vs $AGAINST's; median of $ROUNDS alternating rounds (min-max), us"
  alternate against hier
  echo "# columns: size | grex hier, AGAINST's library | grex hier, this build's | this/AGAINST | bytes across hosts per call, rank 0: AGAINST's / this build's"
  exit 0
fi
echo "# allreduce f32 sum, 2 hosts (network namespaces on a bridge) x 2 ranks, $(nproc) cores; median of $ROUNDS alternating rounds (min-max), us"
echo "# $(mpirun --version 2>/dev/null | head -n 1); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for size in $SIZES; do
  declare -a th=() tf=() tg=() to=() bh=() bf=()
  for ((k = 0; k < ROUNDS; ++k)); do
    read -r t b <<<"$(grex hier "$size")"
    th+=("$t") bh+=("$b")
    read -r t b <<<"$(grex flat "$size")"
    tf+=("$t") bf+=("$b")
    g1=$(gloo ring "$size")
    g2=$(gloo halving_doubling "$size")
    tg+=("$(awk -v a="$g1" -v b="$g2" 'BEGIN { print (a == "nan" || (b != "nan" && b + 0 < a + 0)) ? b : a }')")
    to+=("$(ompi "$size")")
  done
  mh=$(printf '%s\n' "${th[@]}" | median)
  mf=$(printf '%s\n' "${tf[@]}" | median)
  mg=$(printf '%s\n' "${tg[@]}" | median)
  mo=$(printf '%s\n' "${to[@]}" | median)
  printf '| %s | %s (%s) | %s (%s) | %s (%s) | %s (%s) | %.2f | %.2f | %.2f | %s / %s |\n' "$size" \
    "$(fmt "$mh")" "$(printf '%s\n' "${th[@]}" | span)" "$(fmt "$mf")" "$(printf '%s\n' "${tf[@]}" | span)" \
    "$(fmt "$mg")" "$(printf '%s\n' "${tg[@]}" | span)" "$(fmt "$mo")" "$(printf '%s\n' "${to[@]}" | span)" \
    "$(awk -v a="$mh" -v b="$mf" 'BEGIN { print a / b }')" "$(awk -v a="$mh" -v b="$mg" 'BEGIN { print a / b }')" \
    "$(awk -v a="$mh" -v b="$mo" 'BEGIN { print a / b }')" "${bh[0]}" "${bf[0]}"
done
echo "# columns: size | grex hier | grex flat | Gloo (best of ring, halving-doubling) | Open MPI | hier/flat | hier/Gloo | hier/OMPI | bytes across hosts per call, rank 0: hier / flat"

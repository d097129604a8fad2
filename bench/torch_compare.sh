#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The PyTorch backend against gloo and against grex's own C++ API, side by
# side in one run: REPEAT rounds, the implementations alternating inside each
# round; medians with min-max.
#  1. binding overhead: in-place allreduce of a 25 MiB float32 bucket through
#     torch.distributed on grex vs through the C++ API (grex-perf), same ranks;
#  2. training communication overhead: examples/torch/ddp.py and fsdp2.py, the
#     median step time (steps after the first 3) at R ranks minus the 1-rank
#     step time with the same per-rank batch, grex vs gloo;
#  3. all_gather_into_tensor and reduce_scatter_tensor of SIZES (the full
#     tensor) through torch, grex vs gloo;
#  4. (PARTS=p2p) send/recv ping-pong between ranks 0 and 1 of P2P_SIZES,
#     rank 0 receiving by name and without src (recv_anysource), grex vs gloo.
# Commands (BUILD defaults to build/, PY to the interpreter with torch 2):
#   grex-run -n R -- $PY bench/torch_colls.py all_reduce --bytes 26214400 -n 20 -w 5
#   grex-run -n R -- $BUILD/apps/grex-perf/grex-perf allreduce -b 25M -e 25M -n 20 -w 5 --inplace 1 -c 0
#   grex-run -n R -- $PY examples/torch/{ddp,fsdp2}.py --backend B --steps STEPS --json
#   grex-run -n R -- $PY bench/torch_colls.py OP --bytes S --backend B
#   grex-run -n 2 -- $PY bench/torch_colls.py pingpong[_any] --bytes S --backend B -n 2000 -w 200
# Usage: bench/torch_compare.sh   (env: BUILD, PY, REPEAT=3, STEPS=15, RANKS="2", SIZES="1M 4M 16M 64M",
#                                  PARTS="binding train coll", P2P_SIZES="8 1M")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
PY=${PY:-$ROOT/.venv/bin/python}
REPEAT=${REPEAT:-3} STEPS=${STEPS:-15} RANKS=${RANKS:-2} SIZES=${SIZES:-"1M 4M 16M 64M"} P2P_SIZES=${P2P_SIZES:-"8 1M"}
PARTS=${PARTS:-"binding train coll"}  # which of the three to run
export PYTHONPATH=$ROOT/python:$BUILD/python${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export GREX_LOG_LEVEL=error
RUN="$BUILD/apps/grex-run/grex-run --no-tag-output"
stats() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.1f %.1f %.1f", a[int((NR+1)/2)], a[1], a[NR]}'; }
bytes() { numfmt --from=iec "$1"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Median step time in ms of one training launch, the first 3 steps left out.
train() {  # WORKLOAD RANKS BACKEND
  $RUN -n "$2" -- "$PY" "$ROOT/examples/torch/$1.py" --backend "$3" --steps "$STEPS" --json |
    grep '^{"losses"' | "$PY" -c 'import json, statistics, sys; print(statistics.median(json.load(sys.stdin)["step_ms"][3:]))'
}

echo "# torch_compare: $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg), torch $("$PY" -c 'import torch; print(torch.__version__)'), REPEAT=$REPEAT STEPS=$STEPS"
for ((i = 0; i < REPEAT; i++)); do
  order=(grex gloo)
  ((i % 2 == 0)) || order=(gloo grex)
  binding_torch() {
    $RUN -n "$1" -- "$PY" "$ROOT/bench/torch_colls.py" all_reduce --bytes 26214400 -n 20 -w 5 |
      awk -v r="$1" '/^torch_coll/ {print r, $4}' >> "$tmp/torch"
  }
  binding_cpp() {
    $RUN -n "$1" -- "$BUILD/apps/grex-perf/grex-perf" allreduce -b 25M -e 25M -n 20 -w 5 --inplace 1 -c 0 |
      awk -v r="$1" '$1 == 26214400 {print r, $5}' >> "$tmp/cpp"
  }
  for r in $RANKS; do
    [[ " $PARTS " == *" binding "* ]] || break
    if ((i % 2 == 0)); then binding_torch "$r"; binding_cpp "$r"; else binding_cpp "$r"; binding_torch "$r"; fi
  done
  [[ " $PARTS " == *" train "* ]] && for w in ddp fsdp2; do
    for r in 1 $RANKS; do
      for b in "${order[@]}"; do echo "$w $r $b $(train "$w" "$r" "$b")" >> "$tmp/train"; done
    done
  done
  [[ " $PARTS " == *" coll "* ]] && for op in all_gather_into_tensor reduce_scatter_tensor; do
    for s in $SIZES; do
      for r in $RANKS; do
        for b in "${order[@]}"; do
          $RUN -n "$r" -- "$PY" "$ROOT/bench/torch_colls.py" "$op" --bytes "$(bytes "$s")" --backend "$b" |
            awk -v r="$r" -v b="$b" -v s="$s" '/^torch_coll/ {print $2, s, r, b, $4}' >> "$tmp/coll"
        done
      done
    done
  done
  [[ " $PARTS " == *" p2p "* ]] && for s in $P2P_SIZES; do
    for b in "${order[@]}"; do
      for op in pingpong pingpong_any; do
        $RUN -n 2 -- "$PY" "$ROOT/bench/torch_colls.py" "$op" --bytes "$(bytes "$s")" --backend "$b" -n 2000 -w 200 |
          awk -v b="$b" -v s="$s" -v o="$op" '/^torch_coll/ {print o, s, b, $4}' >> "$tmp/p2p"
      done
    done
  done
  echo "torch_compare: round $((i + 1))/$REPEAT done" >&2
done

if [[ -s "$tmp/torch" ]]; then
echo
echo "| ranks | 25 MiB allreduce via torch (us) | via C++ grex-perf (us) | torch / C++ (goal <= 1.05) |"
echo "|---:|---:|---:|---:|"
for r in $RANKS; do
  read -r t tl th <<< "$(awk -v r="$r" '$1 == r {print $2}' "$tmp/torch" | stats)"
  read -r c cl ch <<< "$(awk -v r="$r" '$1 == r {print $2}' "$tmp/cpp" | stats)"
  printf "| %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f |\n" "$r" "$t" "$tl" "$th" "$c" "$cl" "$ch" "$(echo "$t / $c" | bc -l)"
done
fi
if [[ -s "$tmp/train" ]]; then
echo
echo "| workload | ranks | grex step (ms) | gloo step (ms) | grex overhead (ms) | gloo overhead (ms) | grex / gloo overhead (goal <= 0.3) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for w in ddp fsdp2; do
  read -r g1 _ _ <<< "$(awk -v w="$w" '$1 == w && $2 == 1 && $3 == "grex" {print $4}' "$tmp/train" | stats)"
  read -r l1 _ _ <<< "$(awk -v w="$w" '$1 == w && $2 == 1 && $3 == "gloo" {print $4}' "$tmp/train" | stats)"
  printf "| %s | 1 | %.1f | %.1f | | | |\n" "$w" "$g1" "$l1"
  for r in $RANKS; do
    read -r g gl gh <<< "$(awk -v w="$w" -v r="$r" '$1 == w && $2 == r && $3 == "grex" {print $4}' "$tmp/train" | stats)"
    read -r l ll lh <<< "$(awk -v w="$w" -v r="$r" '$1 == w && $2 == r && $3 == "gloo" {print $4}' "$tmp/train" | stats)"
    go=$(echo "$g - $g1" | bc -l) lo=$(echo "$l - $l1" | bc -l)
    printf "| %s | %s | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.1f | %.1f | %.2f |\n" "$w" "$r" "$g" "$gl" "$gh" \
      "$l" "$ll" "$lh" "$go" "$lo" "$(echo "$go / $lo" | bc -l)"
  done
done
fi
if [[ -s "$tmp/coll" ]]; then
echo
echo "| op | size | ranks | grex (us) | gloo (us) | grex / gloo (goal <= 0.3) |"
echo "|---|---:|---:|---:|---:|---:|"
for op in all_gather_into_tensor reduce_scatter_tensor; do
  for s in $SIZES; do
    for r in $RANKS; do
      read -r g gl gh <<< "$(awk -v o="$op" -v s="$s" -v r="$r" '$1 == o && $2 == s && $3 == r && $4 == "grex" {print $5}' "$tmp/coll" | stats)"
      read -r l ll lh <<< "$(awk -v o="$op" -v s="$s" -v r="$r" '$1 == o && $2 == s && $3 == r && $4 == "gloo" {print $5}' "$tmp/coll" | stats)"
      printf "| %s | %s | %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f |\n" "$op" "$s" "$r" "$g" "$gl" "$gh" "$l" "$ll" "$lh" \
        "$(echo "$g / $l" | bc -l)"
    done
  done
done
fi
if [[ -s "$tmp/p2p" ]]; then
echo
echo "| ping-pong, 2 ranks | size | grex one-way (us) | gloo one-way (us) | grex / gloo |"
echo "|---|---:|---:|---:|---:|"
for op in pingpong pingpong_any; do
  for s in $P2P_SIZES; do
    read -r g gl gh <<< "$(awk -v o="$op" -v s="$s" '$1 == o && $2 == s && $3 == "grex" {print $4}' "$tmp/p2p" | stats)"
    read -r l ll lh <<< "$(awk -v o="$op" -v s="$s" '$1 == o && $2 == s && $3 == "gloo" {print $4}' "$tmp/p2p" | stats)"
    printf "| %s | %s | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.2f |\n" "$([[ $op == pingpong ]] && echo "recv(src)" || echo "recv() any source")" \
      "$s" "$g" "$gl" "$gh" "$l" "$ll" "$lh" "$(echo "$g / $l" | bc -l)"
  done
done
fi

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The PyTorch backend against its peers, side by side in one run (medians of
# REPEAT alternating runs):
#  1. binding overhead: in-place allreduce of a 25 MiB float32 bucket through
#     torch.distributed on grex vs through the C++ API (grex-perf), same ranks;
#  2. DDP communication overhead: examples/pytorch_ddp.py's mean step time at
#     2 and 4 ranks minus the 1-rank step time (same per-rank batch), grex vs gloo.
# Commands (BUILD defaults to build/, PY to the interpreter with torch):
#   grex-run -n R -- $PY bench/torch_allreduce.py --bytes 26214400 -n 20 -w 5
#   grex-run -n R -- $BUILD/apps/grex-perf/grex-perf allreduce -b 25M -e 25M -n 20 -w 5 --inplace 1 -c 0
#   grex-run -n R -- $PY examples/pytorch_ddp.py --steps STEPS --only grex|gloo
# Usage: bench/torch_compare.sh        (env: BUILD, PY, REPEAT=3, STEPS=12, RANKS="2 4")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
PY=${PY:-$ROOT/.venv/bin/python}  # the torch 2 environment grex_torch builds against (tests/scripts/venv.sh)
REPEAT=${REPEAT:-3} STEPS=${STEPS:-12} RANKS=${RANKS:-"2 4"}
export PYTHONPATH=$ROOT/python:$BUILD/python${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export GREX_LOG_LEVEL=error
RUN="$BUILD/apps/grex-run/grex-run --no-tag-output"
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# torch_compare: $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg), REPEAT=$REPEAT STEPS=$STEPS"
for ((i = 0; i < REPEAT; i++)); do
  for r in $RANKS; do
    $RUN -n "$r" -- "$PY" "$ROOT/bench/torch_allreduce.py" --bytes 26214400 -n 20 -w 5 |
      awk -v r="$r" '/^torch_allreduce/ {print r, $3}' >> "$tmp/torch"
    $RUN -n "$r" -- "$BUILD/apps/grex-perf/grex-perf" allreduce -b 25M -e 25M -n 20 -w 5 --inplace 1 -c 0 |
      awk -v r="$r" '$1 == 26214400 {print r, $5}' >> "$tmp/cpp"
  done
  for r in 1 $RANKS; do
    for b in grex gloo; do
      $RUN -n "$r" -- "$PY" "$ROOT/examples/pytorch_ddp.py" --steps "$STEPS" --only "$b" |
        awk -v r="$r" -v b="$b" '$1 == "#" && $2 == b":" {print r, b, $5}' >> "$tmp/ddp"
    done
  done
done

echo
echo "| ranks | 25 MiB allreduce via torch (us) | via C++ grex-perf (us) | torch / C++ (goal <= 1.05) |"
echo "|---:|---:|---:|---:|"
for r in $RANKS; do
  t=$(awk -v r="$r" '$1 == r {print $2}' "$tmp/torch" | median)
  c=$(awk -v r="$r" '$1 == r {print $2}' "$tmp/cpp" | median)
  printf "| %s | %.0f | %.0f | %.2f |\n" "$r" "$t" "$c" "$(echo "$t / $c" | bc -l)"
done
echo
echo "| ranks | grex step (ms) | gloo step (ms) | grex overhead (ms) | gloo overhead (ms) | grex / gloo overhead (goal <= 0.3) |"
echo "|---:|---:|---:|---:|---:|---:|"
g1=$(awk '$1 == 1 && $2 == "grex" {print $3}' "$tmp/ddp" | median)
l1=$(awk '$1 == 1 && $2 == "gloo" {print $3}' "$tmp/ddp" | median)
printf "| 1 | %.1f | %.1f | | | |\n" "$g1" "$l1"
for r in $RANKS; do
  g=$(awk -v r="$r" '$1 == r && $2 == "grex" {print $3}' "$tmp/ddp" | median)
  l=$(awk -v r="$r" '$1 == r && $2 == "gloo" {print $3}' "$tmp/ddp" | median)
  go=$(echo "$g - $g1" | bc -l) lo=$(echo "$l - $l1" | bc -l)
  printf "| %s | %.1f | %.1f | %.1f | %.1f | %.2f |\n" "$r" "$g" "$l" "$go" "$lo" "$(echo "$go / $lo" | bc -l)"
done
echo
echo "# raw: torch $(tr '\n' ' ' < "$tmp/torch")| cpp $(tr '\n' ' ' < "$tmp/cpp")| ddp $(tr '\n' ' ' < "$tmp/ddp")"

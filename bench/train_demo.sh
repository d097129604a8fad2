#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 29 on the C++ training demo (examples/train/train.cc), side by side in
# one run, REPEAT rounds with the variants alternating inside each round:
#  1. compression: the loss after 300 steps with the gradient sent as
#     bf16, int8 and top-k 1 % (error feedback on), against float32;
#  2. a straggler: the last rank sleeps DELAY ms every step. Rank 0's mean
#     step time and loss undelayed, delayed, and delayed with a deadline
#     allreduce (DEADLINE ms, late gradients dropped), and undelayed with it.
#  3. (PARTS=ddp) the PyTorch DDP example with grex's compressing comm hooks
#     (bf16, int8, top-k 1 %, error feedback on) against none: the eval loss
#     after DDP_STEPS (300) steps at lr 0.02, at RANKS ranks, for the hooks in
#     DDP_HOOKS (default all four). Round i runs --seed i (its
#     model's initial weights and batches): a run is deterministic, but one
#     seed's final loss moves by up to 15 % between variants that learn alike,
#     so the table gives the mean over the REPEAT seeds.
#  4. (PARTS=ddpstraggler) the DDP example with the last rank DELAY ms late
#     every step: rank 0's median step time and the loss after 60 steps,
#     undelayed, delayed, and delayed with grex's deadline hook (DEADLINE ms).
# Commands (one per variant; BUILD defaults to build/, PY to .venv's python):
#   grex-run -n R -- $BUILD/examples/train/train --steps 300 --log-every 1000 [--compress C]
#   grex-run -n R -- $BUILD/examples/train/train --steps 30 --hidden 4096 --batch 1024 --lr 0.02 \
#       --log-every 1000 [--delay-ms 50] [--deadline-ms 5]
#   grex-run -n R -- $PY examples/torch/ddp.py --steps DDP_STEPS --lr 0.02 --json --seed i [--hook grex-bf16|grex-int8|grex-topk]
#   grex-run -n R -- $PY examples/torch/ddp.py --steps 60 --hidden 2048 --batch 256 --lr 0.02 --json \
#       [--delay-ms 50] [--deadline-ms 5]
# Usage: bench/train_demo.sh   (env: BUILD, PY, REPEAT=3, RANKS=2, DELAY=50, DEADLINE=5, DDP_STEPS=300,
#                               DDP_HOOKS="none grex-bf16 grex-int8 grex-topk" (none always runs;
#                               grex-topk:hierarchical runs it with GREX_TOPK=hierarchical),
#                               HOSTS=1 (the DDP part's ranks as HOSTS hosts: GREX_HOST_ID),
#                               PARTS="compress straggler ddp"; ddpstraggler on demand)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
REPEAT=${REPEAT:-3} RANKS=${RANKS:-2} DELAY=${DELAY:-50} DEADLINE=${DEADLINE:-5} DDP_STEPS=${DDP_STEPS:-300}
read -r -a ddp_hooks <<<"${DDP_HOOKS:-none grex-bf16 grex-int8 grex-topk}"
[[ " ${ddp_hooks[*]} " == *" none "* ]] || ddp_hooks=(none "${ddp_hooks[@]}")  # the reference
PARTS=${PARTS:-"compress straggler ddp"}
PY=${PY:-$ROOT/.venv/bin/python}
export PYTHONPATH=$ROOT/python:$BUILD/python${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export GREX_LOG_LEVEL=error
RUN="$BUILD/apps/grex-run/grex-run --no-tag-output -n $RANKS --"
# HOSTS > 1: the DDP part's ranks as that many "hosts" of this machine
# (GREX_HOST_ID by rank: shm inside a host, DPDK memif between hosts).
HOSTS=${HOSTS:-1}
DDP_RUN=($RUN)
((HOSTS > 1)) && DDP_RUN=(env GREX_BACKEND=auto GREX_NET=dpdk $RUN sh -c \
  "GREX_HOST_ID=h\$((GREX_RANK * $HOSTS / $RANKS)) exec \"\$@\"" sh)
TRAIN=$BUILD/examples/train/train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stats() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.4f %.4f %.4f", a[int((NR+1)/2)], a[1], a[NR]}'; }
# "eval loss L ..." (rank 0's final model on the first 2048 samples, the same
# for every variant) and "mean step S ms, K of N ranks ..." of one launch, as "L S K".
one() { $RUN "$TRAIN" --log-every 1000 "$@" | awk '/^eval loss/ {l = $3} /^mean step/ {s = $3; k = $5} END {print l, s, k}'; }

echo "# train_demo: $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $RANKS ranks, REPEAT=$REPEAT"
compress=(none bf16 int8 topk)
straggler=("plain" "delayed" "delayed+deadline" "deadline")
args_of() {
  case $1 in
    plain) echo "" ;;
    delayed) echo "--delay-ms $DELAY" ;;
    delayed+deadline) echo "--delay-ms $DELAY --deadline-ms $DEADLINE" ;;
    deadline) echo "--deadline-ms $DEADLINE" ;;
  esac
}
for ((i = 0; i < REPEAT; i++)); do
  if [[ " $PARTS " == *" compress "* ]]; then
    for c in "${compress[@]}"; do echo "$c $(one --steps 300 --compress "$c")" >> "$tmp/compress"; done
  fi
  if [[ " $PARTS " == *" straggler "* ]]; then
    order=("${straggler[@]}")
    ((i % 2 == 0)) || order=("deadline" "delayed+deadline" "delayed" "plain")
    for v in "${order[@]}"; do
      # shellcheck disable=SC2046  # the variant's flags split on purpose
      echo "$v $(one --steps 30 --hidden 4096 --batch 1024 --lr 0.02 $(args_of "$v"))" >> "$tmp/straggler"
    done
  fi
  if [[ " $PARTS " == *" ddp "* ]]; then
    for h in "${ddp_hooks[@]}"; do
      form=${h#*:}
      [[ $form == "$h" ]] && form=""
      l=$(env ${form:+GREX_TOPK=$form} "${DDP_RUN[@]}" "$PY" "$ROOT/examples/torch/ddp.py" --steps "$DDP_STEPS" \
        --lr 0.02 --json --seed "$i" --hook "${h%%:*}" |
        grep '^{"losses"' | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["eval_loss"])')
      echo "$h $l" >> "$tmp/ddp"
    done
  fi
  if [[ " $PARTS " == *" ddpstraggler "* ]]; then
    order=("plain" "delayed" "delayed+deadline")
    ((i % 2 == 0)) || order=("delayed+deadline" "delayed" "plain")
    for v in "${order[@]}"; do
      # shellcheck disable=SC2046  # the variant's flags split on purpose
      l=$($RUN "$PY" "$ROOT/examples/torch/ddp.py" --steps 60 --hidden 2048 --batch 256 --lr 0.02 --json \
        $(args_of "$v") | grep '^{"losses"' | "$PY" -c 'import json, statistics, sys
d = json.load(sys.stdin); print(d["eval_loss"], statistics.median(d["step_ms"]))')
      echo "$v $l" >> "$tmp/ddpstraggler"
    done
  fi
  echo "train_demo: round $((i + 1))/$REPEAT done" >&2
done

if [[ -s "$tmp/compress" ]]; then
  read -r base _ _ <<< "$(awk '$1 == "none" {print $2}' "$tmp/compress" | stats)"
  echo
  echo "| gradient | eval loss after 300 steps (median, min-max) | vs float32 | goal |"
  echo "|---|---:|---:|---|"
  for c in "${compress[@]}"; do
    read -r l ll lh <<< "$(awk -v c="$c" '$1 == c {print $2}' "$tmp/compress" | stats)"
    goal="within 2 %"
    [[ $c == topk ]] && goal="within 5 %"
    [[ $c == none ]] && goal=""
    printf "| %s | %.4f (%.4f-%.4f) | %+.1f %% | %s |\n" "$c" "$l" "$ll" "$lh" "$(echo "($l / $base - 1) * 100" | bc -l)" "$goal"
  done
fi
if [[ -s "$tmp/straggler" ]]; then
  read -r base_ms _ _ <<< "$(awk '$1 == "plain" {print $3}' "$tmp/straggler" | stats)"
  read -r base_loss _ _ <<< "$(awk '$1 == "plain" {print $2}' "$tmp/straggler" | stats)"
  echo
  echo "| job (last rank +${DELAY} ms a step) | rank 0 step (ms) | vs undelayed | ranks in time | eval loss after 30 steps | vs undelayed |"
  echo "|---|---:|---:|---:|---:|---:|"
  for v in "${straggler[@]}"; do
    read -r s sl sh <<< "$(awk -v v="$v" '$1 == v {print $3}' "$tmp/straggler" | stats)"
    read -r l ll lh <<< "$(awk -v v="$v" '$1 == v {print $2}' "$tmp/straggler" | stats)"
    read -r k _ _ <<< "$(awk -v v="$v" '$1 == v {print $4}' "$tmp/straggler" | stats)"
    printf "| %s | %.1f (%.1f-%.1f) | %.2f | %.2f | %.4f (%.4f-%.4f) | %+.1f %% |\n" "$v" "$s" "$sl" "$sh" \
      "$(echo "$s / $base_ms" | bc -l)" "$k" "$l" "$ll" "$lh" "$(echo "($l / $base_loss - 1) * 100" | bc -l)"
  done
fi
if [[ -s "$tmp/ddp" ]]; then
  mean() { awk 'NR == 1 { lo = hi = $1 } { s += $1; if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 }
    END { if (NR) printf "%.4f %s %s", s / NR, lo, hi }'; }
  read -r base _ _ <<< "$(awk '$1 == "none" {print $2}' "$tmp/ddp" | mean)"
  echo
  echo "| DDP hook | eval loss after $DDP_STEPS steps (mean of $REPEAT seeds, min-max) | vs none | goal |"
  echo "|---|---:|---:|---|"
  for h in "${ddp_hooks[@]}"; do
    read -r l ll lh <<< "$(awk -v h="$h" '$1 == h {print $2}' "$tmp/ddp" | mean)"
    goal="within 2 %"
    [[ $h == grex-topk* ]] && goal="within 5 %"
    [[ $h == none ]] && goal=""
    printf "| %s | %.4f (%.4f-%.4f) | %+.1f %% | %s |\n" "$h" "$l" "$ll" "$lh" "$(echo "($l / $base - 1) * 100" | bc -l)" "$goal"
  done
fi
if [[ -s "$tmp/ddpstraggler" ]]; then
  read -r base_ms _ _ <<< "$(awk '$1 == "plain" {print $3}' "$tmp/ddpstraggler" | stats)"
  read -r base_loss _ _ <<< "$(awk '$1 == "plain" {print $2}' "$tmp/ddpstraggler" | stats)"
  echo
  echo "| DDP job (last rank +${DELAY} ms a step) | rank 0 step, median (ms) | vs undelayed | eval loss after 60 steps | vs undelayed |"
  echo "|---|---:|---:|---:|---:|"
  for v in plain delayed delayed+deadline; do
    read -r s sl sh <<< "$(awk -v v="$v" '$1 == v {print $3}' "$tmp/ddpstraggler" | stats)"
    read -r l ll lh <<< "$(awk -v v="$v" '$1 == v {print $2}' "$tmp/ddpstraggler" | stats)"
    printf "| %s | %.1f (%.1f-%.1f) | %.2f | %.4f (%.4f-%.4f) | %+.1f %% |\n" "$v" "$s" "$sl" "$sh" \
      "$(echo "$s / $base_ms" | bc -l)" "$l" "$ll" "$lh" "$(echo "($l / $base_loss - 1) * 100" | bc -l)"
  done
fi

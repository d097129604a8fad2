#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The compressed allreduce's table (bench/compressed.sh over memif,
# bench/compressed_netns.sh over af_packet): sourced, then
#   compressed_table RUNS "RANKS..." BASE_LABEL
# (and compressed_against for AGAINST=DIR runs)
# with RUNS holding lines "ranks format microseconds" (formats none, bf16,
# fp16, int8, topk): each format's median (min-max) and its ratio to none's
# ("-" for a format not run).
# compressed_floor RUNS MEMBW "RANKS..." SIZE CORES: what memory alone takes (MEMBW
# lines "ranks GB/s-per-thread"), against the uncompressed median.
# compressed_median RUNS N FORMAT: the median time of N ranks in FORMAT ("" where none ran).
compressed_median() {
  awk -v n="$2" -v f="$3" '$1 == n && $2 == f { print $3 }' "$1" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
# compressed_against RUNS_AGAINST RUNS_THIS "RANKS..." FORMAT...: per rank count,
# this build's median over AGAINST's for each format (AGAINST=DIR runs).
compressed_against() {
  local against=$1 this=$2 ranks=$3 n f line
  shift 3
  echo "this build's median / AGAINST's, per format:"
  for n in $ranks; do
    line="| $n ranks |"
    for f in "$@"; do
      line+=" $f $(awk -v a="$(compressed_median "$against" "$n" "$f")" -v b="$(compressed_median "$this" "$n" "$f")" \
        'BEGIN { if (a == "" || b == "") printf "-"; else printf "%.2f", b / a }') |"
    done
    echo "$line"
  done
}
compressed_table() {
  local runs=$1 ranks=$2 label=$3 n base
  med() { compressed_median "$runs" "$1" "$2"; }
  stat() {
    awk -v n="$1" -v f="$2" '$1 == n && $2 == f { print $3 }' "$runs" | sort -g |
      awk '{ a[NR] = $1 } END { if (NR) printf "%.0f (%.0f–%.0f)", a[int((NR + 1) / 2)], a[1], a[NR]; else printf "-" }'
  }
  echo "| ranks | $label (us) | bf16 (us) | fp16 (us) | int8 (us) | top-k 1 % (us) | bf16 / $label (goal <= 0.55) | fp16 / $label | int8 / $label (goal <= 0.3) | top-k / $label (goal <= 0.1) |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for n in $ranks; do
    base=$(med "$n" none)
    ratio() { awk -v a="$(med "$n" "$1")" -v b="$base" 'BEGIN { if (a == "" || b == "") printf "-"; else printf "%.2f", a / b }'; }
    echo "| $n | $(stat "$n" none) | $(stat "$n" bf16) | $(stat "$n" fp16) | $(stat "$n" int8) | $(stat "$n" topk) | $(ratio bf16) | $(ratio fp16) | $(ratio int8) | $(ratio topk) |"
  done
}
compressed_floor() {
  local runs=$1 membw=$2 ranks=$3 size=$4 cores=$5 n
  echo "memory floor: each of N ranks reads its $size input and writes its $size output (one copy of $size a rank):"
  echo "N copies on min(N, $cores) cores at the per-thread rate bench/membw measured in the same rounds (median"
  echo "over rounds; the faster of memcpy and streaming stores). No format's time can fall below it here."
  echo "| ranks | copy rate per thread (GB/s) | floor (us) | floor / uncompressed |"
  echo "|---:|---:|---:|---:|"
  for n in $ranks; do
    awk -v n="$n" '$1 == n { print $2 }' "$membw" | sort -g |
      awk -v n="$n" -v cores="$cores" -v size="$size" -v base="$(compressed_median "$runs" "$n" none)" '
        { r[++k] = $1 }
        END {
          if (!k) exit
          rate = r[int((k + 1) / 2)]
          bytes = size + 0; u = substr(size, length(size))
          if (u == "K" || u == "k") bytes *= 1024; else if (u == "M" || u == "m") bytes *= 1048576
          else if (u == "G" || u == "g") bytes *= 1073741824
          t = n < cores ? n : cores; waves = int((n + t - 1) / t)
          floor_us = waves * bytes / (rate * 1e3)
          printf "| %d | %.2f | %.0f | %s |\n", n, rate, floor_us, base == "" ? "-" : sprintf("%.2f", floor_us / base)
        }'
  done
}

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex-perf end-to-end checks under grex-run: `perf_test.sh CASE GREX_RUN GREX_PERF`.
# Each case asserts the exit code, the column header, the row count and, for
# the collectives, that every row reports #wrong 0 and the closing lines.
set -u

CASE=$1
GREX_RUN=$2
GREX_PERF=$3

TMP=$(mktemp -d "${TMPDIR:-/tmp}/grex-perf-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$TMP"/out "$TMP"/err; do
    [[ -f $f ]] && { echo "--- ${f##*/}:" >&2; cat "$f" >&2; }
  done
  exit 1
}

# Runs grex-perf on N ranks: perf N ARGS...; output in $TMP/out and $TMP/err, status in RC.
perf() {
  local n=$1
  shift
  "$GREX_RUN" -n "$n" --no-tag-output -- "$GREX_PERF" "$@" >"$TMP/out" 2>"$TMP/err"
  RC=$?
}

expect_rc() { [[ $RC -eq $1 ]] || fail "exit code $RC, expected $1"; }
expect_grep() { grep -qE -- "$1" "$TMP/out" || fail "nothing matches /$1/ in the output"; }
expect_err() { grep -qE -- "$1" "$TMP/err" || fail "nothing matches /$1/ on stderr"; }
# Data rows: lines that start with blanks and a number.
rows() { grep -E '^ *[0-9]' "$TMP/out"; }
expect_rows() {
  local n
  n=$(rows | wc -l)
  [[ $n -eq $1 ]] || fail "$n result rows, expected $1"
}
# Every row has $1 fields.
expect_fields() {
  rows | awk -v want="$1" 'NF != want { bad = 1 } END { exit bad }' || fail "a row does not have $1 columns"
}

readonly NCCL_HEADER='^# +size +count +type +redop +time +algbw +busbw +#wrong +time +algbw +busbw +#wrong$'
# The other collectives print nccl-tests' root column too.
readonly NCCL_ROOT_HEADER='^# +size +count +type +redop +root +time +algbw +busbw +#wrong +time +algbw +busbw +#wrong$'

# Checks of a collective table with the root column (13 fields, both placements):
# expect_collective N_RANKS BUSBW_FACTOR BLOCKS_PER_RANK(0|1) REDOP_RE ROOT
expect_collective() {
  local n=$1 factor=$2 blocks=$3 redop=$4 root=$5
  expect_rc 0
  expect_grep "$NCCL_ROOT_HEADER"
  expect_fields 13
  rows | awk '$9 != "0" || $13 != "0" { bad = 1 } END { exit bad }' || fail "a row has #wrong != 0"
  rows | awk '$6 <= 0 || $10 <= 0 { bad = 1 } END { exit bad }' || fail "a row has a non-positive time"
  rows | awk -v re="^($redop)\$" '$4 !~ re { bad = 1 } END { exit bad }' || fail "a row's redop is not $redop"
  rows | awk -v r="$root" '$5 != r { bad = 1 } END { exit bad }' || fail "a row's root is not $root"
  # busbw = algbw * factor, both printed rounded to 2 decimals.
  rows | awk -v f="$factor" 'function off(a, b) { d = a * f - b; t = 0.005 * (1 + f) + 1e-6; return d > t || d < -t }
                             off($7, $8) || off($11, $12) { bad = 1 } END { exit bad }' ||
    fail "busbw != algbw * $factor"
  # size = count * type size, times the ranks for per-rank blocks (nccl-tests).
  rows | awk -v n="$n" -v blocks="$blocks" '
    BEGIN { ts["float"] = 4; ts["double"] = 8; ts["int32"] = 4; ts["int64"] = 8; ts["uint8"] = 1 }
    $1 != $2 * ts[$3] * (blocks ? n : 1) { bad = 1 } END { exit bad }' || fail "size != count * typesize * ranks"
  expect_grep '^# Out of bounds values : 0 OK$'
  expect_grep '^# Avg bus bandwidth    : [0-9.e+-]+'
}

case_allreduce() {
  perf 2 allreduce -b 8 -e 1M -f 4 -n 3 -w 1 -c 1
  expect_rc 0
  expect_grep "$NCCL_HEADER"
  expect_rows 9
  expect_fields 12
  rows | awk '$8 != "0" || $12 != "0" { bad = 1 } END { exit bad }' || fail "a row has #wrong != 0"
  rows | awk '$5 <= 0 || $9 <= 0 { bad = 1 } END { exit bad }' || fail "a row has a non-positive time"
  # busbw = algbw * 2(n-1)/n = algbw for 2 ranks.
  rows | awk '$6 != $7 || $10 != $11 { bad = 1 } END { exit bad }' || fail "busbw != algbw on 2 ranks"
  expect_grep '^# Out of bounds values : 0 OK$'
  expect_grep '^# Avg bus bandwidth    : [0-9.e+-]+'
}

# Every type and operator on 3 ranks, in both placements, with JSON output.
case_allreduce_types() {
  perf 3 allreduce -b 4 -e 4K -f 32 -n 2 -w 1 -d all -o all --json "$TMP/rows.json"
  expect_rc 0
  expect_rows 75  # 5 types x 5 ops x 3 sizes
  rows | awk '$8 != "0" || $12 != "0" { bad = 1 } END { exit bad }' || fail "a row has #wrong != 0"
  expect_grep '^# Out of bounds values : 0 OK$'
  [[ -s $TMP/rows.json ]] || fail "no JSON written"
  grep -q '"wrong": 0' "$TMP/rows.json" || fail "JSON rows lack \"wrong\": 0"
  [[ $(grep -c '"placement"' "$TMP/rows.json") -eq 150 ]] || fail "JSON does not hold 150 rows"
}

case_allreduce_unchecked() {
  perf 2 allreduce -b 1K -e 1K -n 2 -w 0 -c 0 --inplace 0 --alloc
  expect_rc 0
  expect_grep '^# +size +count +type +redop +time +algbw +busbw +#wrong$'
  expect_rows 1
  rows | awk '$8 != "N/A" { bad = 1 } END { exit bad }' || fail "#wrong should be N/A with -c 0"
}

# Every type and operator on 3 ranks; 3 ranks do not divide most sizes.
case_reduce_scatter() {
  perf 3 reduce_scatter -b 12 -e 3K -f 16 -n 3 -w 1 -c 1 -d all -o all
  expect_collective 3 0.666667 1 'sum|prod|min|max|avg' -1
  expect_rows 75  # 5 types x 5 ops x 3 sizes
}

case_allgather() {
  perf 2 allgather -b 8 -e 1M -f 8 -n 3 -w 1 -c 1
  expect_collective 2 0.5 1 none -1
  expect_rows 6
  perf 3 allgather -b 1 -e 4K -f 4 -n 2 -w 1 -c 1 -d all --alloc
  expect_collective 3 0.666667 1 none -1
  expect_rows 35  # 5 types x 7 sizes
}

case_broadcast() {
  perf 3 broadcast -b 8 -e 256K -f 8 -n 3 -w 1 -c 1 -d all -r 2
  expect_collective 3 1 0 none 2
  expect_rows 30  # 5 types x 6 sizes
}

case_reduce() {
  perf 3 reduce -b 8 -e 8K -f 32 -n 3 -w 1 -c 1 -d all -o all --root 1
  expect_collective 3 1 0 'sum|prod|min|max|avg' 1
  expect_rows 75  # 5 types x 5 ops x 3 sizes
  perf 2 reduce -b 8 -e 1M -f 8 -n 3 -w 1 -c 1
  expect_collective 2 1 0 sum 0
  expect_rows 6
}

case_alltoall() {
  perf 2 alltoall -b 8 -e 1M -f 8 -n 3 -w 1 -c 1 --json "$TMP/rows.json"
  expect_collective 2 0.5 1 none -1
  expect_rows 6
  grep -q '"mode": "alltoall"' "$TMP/rows.json" || fail "JSON lacks the mode"
  [[ $(grep -c '"placement"' "$TMP/rows.json") -eq 12 ]] || fail "JSON does not hold 12 rows"
  [[ $(grep -c '"root": -1, .*"wrong": 0}' "$TMP/rows.json") -eq 12 ]] || fail "JSON rows lack root -1 or \"wrong\": 0"
  perf 3 alltoall -b 6 -e 6K -f 4 -n 2 -w 1 -c 1 -d all
  expect_collective 3 0.666667 1 none -1
  expect_rows 30  # 5 types x 6 sizes
}

# Only one placement, unchecked: one group of columns and #wrong N/A.
case_collectives_unchecked() {
  local m
  for m in reduce_scatter allgather broadcast reduce alltoall; do
    perf 2 "$m" -b 1K -e 4K -n 2 -w 0 -c 0 --inplace 1
    expect_rc 0
    expect_grep '^# +size +count +type +redop +root +time +algbw +busbw +#wrong$'
    expect_rows 3
    expect_fields 9
    rows | awk '$9 != "N/A" { bad = 1 } END { exit bad }' || fail "$m: #wrong should be N/A with -c 0"
    expect_grep '^# Avg bus bandwidth    : [0-9.e+-]+'
  done
}

case_send_bw() {
  perf 2 send_bw -a -n 20
  expect_rc 0
  expect_grep '^ #bytes +#iterations +BW peak\[GB/sec\] +BW average\[GB/sec\] +MsgRate\[Mpps\]$'
  expect_rows 23
  expect_fields 5
  rows | awk '$5 <= 0 { bad = 1 } END { exit bad }' || fail "a row has a zero message rate"
}

case_send_bw_memcpy() {
  perf 3 send_bw -s 64K -n 50 --alloc --memcpy-ref --report_gbits
  expect_rc 0
  expect_grep 'BW average\[Gb/sec\] +MsgRate\[Mpps\] +memcpy\[GB/s\] +ratio$'
  expect_grep 'Buffers +: alloc'
  expect_rows 1
  expect_fields 7
}

case_send_lat() {
  perf 2 send_lat -s 8 -n 100
  expect_rc 0
  expect_grep '^ #bytes +#iterations +t_min\[usec\] +t_max\[usec\] +t_typical\[usec\] +t_avg\[usec\] +t_stdev\[usec\] +99% percentile\[usec\] +99.9% percentile\[usec\]$'
  expect_rows 1
  expect_fields 9
  rows | awk '$1 != 8 || $2 != 100 || $3 <= 0 || $3 > $4 { bad = 1 } END { exit bad }' || fail "bad latency row"
}

case_errors() {
  "$GREX_PERF" allreduce -o xor >"$TMP/out" 2>"$TMP/err"
  RC=$?
  expect_rc 2
  expect_err "unknown reduction 'xor'"
  "$GREX_PERF" --help >"$TMP/out" 2>"$TMP/err"
  RC=$?
  expect_rc 0
  expect_grep '^Usage: '
  perf 1 send_lat -s 8 -n 10
  expect_rc 1
  expect_err 'send_lat needs at least 2 ranks'
  "$GREX_PERF" allgather -r 1 >"$TMP/out" 2>"$TMP/err"
  RC=$?
  expect_rc 2
  expect_err '-r does not apply to allgather'
  perf 2 broadcast -r 2 -b 8 -e 8
  expect_rc 1
  expect_err 'broadcast: -r 2 is not a rank of 0..1'
}

"case_$CASE" || exit 1
echo "PASS [$CASE]"

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

# allreduce with AllreduceOptions: a deadline every rank makes is the exact
# sum (checked); compressed calls run unchecked (bf16 is not exact).
case_allreduce_options() {
  perf 3 allreduce -b 4K -e 64K -f 16 -n 2 -w 1 -c 1 --deadline 60000
  expect_rc 0
  expect_rows 2
  rows | awk '$8 != "0" || $12 != "0" { bad = 1 } END { exit bad }' || fail "a deadline row has #wrong != 0"
  perf 2 allreduce -b 64K -e 64K -n 2 -w 1 -c 0 --compress bf16
  expect_rc 0
  expect_rows 1
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

# sendrecv: every rank sends to the next and receives from the previous;
# out of place only, busbw = algbw, checked against the previous rank's input.
case_sendrecv() {
  perf 3 sendrecv -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 -d all --json "$TMP/rows.json"
  expect_rc 0
  expect_grep '^# +size +count +type +redop +root +time +algbw +busbw +#wrong$'
  expect_rows 25  # 5 types x 5 sizes
  expect_fields 9
  rows | awk '$9 != "0" || $6 <= 0 || $4 != "none" || $5 != "-1" { bad = 1 } END { exit bad }' ||
    fail "a row is wrong, not positive, or not redop none / root -1"
  rows | awk 'function off(a, b) { d = a - b; return d > 0.011 || d < -0.011 } off($7, $8) { bad = 1 } END { exit bad }' ||
    fail "busbw != algbw"
  grep -q '"mode": "sendrecv"' "$TMP/rows.json" || fail "JSON lacks the mode"
  GREX_PERF_CORRUPT_RANK=2 perf 3 sendrecv -b 64 -e 64 -n 1 -w 0
  expect_rc 1
  expect_grep '^# Out of bounds values : 1 FAILED$'
  perf 2 sendrecv --inplace 1
  expect_rc 2
  expect_err 'sendrecv has no in-place form'
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
  expect_grep '^ #bytes +#iterations +BW peak\[MB/sec\] +BW average\[MB/sec\] +MsgRate\[Mpps\]$'
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

readonly BW_HEADER='^ #bytes +#iterations +BW peak\[MB/sec\] +BW average\[MB/sec\] +MsgRate\[Mpps\]$'
readonly LAT_HEADER='^ #bytes +#iterations +t_min\[usec\] +t_max\[usec\] +t_typical\[usec\] +t_avg\[usec\] +t_stdev\[usec\] +99% percentile\[usec\] +99.9% percentile\[usec\]$'

case_write_bw() {
  perf 2 write_bw -a -e 1M -n 50 -t 16
  expect_rc 0
  expect_grep 'RDMA_Write BW Test'
  expect_grep "$BW_HEADER"
  expect_rows 20
  expect_fields 5
  rows | awk '$2 != 50 || $5 <= 0 || ($1 >= 1024 && $4 <= 0) { bad = 1 } END { exit bad }' ||
    fail "a row has no bandwidth or the wrong count"
}

case_write_lat() {
  perf 2 write_lat -a -e 4K -n 200
  expect_rc 0
  expect_grep 'RDMA_Write Latency Test'
  expect_grep "$LAT_HEADER"
  expect_rows 12
  expect_fields 9
  rows | awk '$2 != 200 || $3 <= 0 || $3 > $5 || $5 > $4 { bad = 1 } END { exit bad }' || fail "bad latency row"
}

# -q flows with -D: iterations are counted, not given; --stats prints one line per flow and rank.
case_flows_duration() {
  perf 2 write_bw -q 3 -t 8 -s 64K -D 0.3 --stats
  expect_rc 0
  expect_grep 'Flows \(-q\) +: 3'
  expect_grep 'Duration +: 0.3'
  expect_rows 1
  rows | awk '$2 < 10 || $4 <= 0 { bad = 1 } END { exit bad }' || fail "too few iterations in 0.3 s"
  [[ $(grep -c '^# stats rank 0 flow [0-2] .*writes=' "$TMP/out") -eq 3 ]] || fail "not one stats line per client flow"
  [[ $(grep -c '^# stats rank 1 flow [0-2] ' "$TMP/out") -eq 3 ]] || fail "not one stats line per server flow"
  perf 3 send_bw -q 2 -t 4 -s 4K -D 0.2
  expect_rc 0
  expect_rows 1
  # The progress line (after GREX_PERF_PROGRESS_MS instead of 3 s), on stderr only.
  GREX_PERF_PROGRESS_MS=0 perf 2 write_bw -a -e 64 -D 0.1
  expect_rc 0
  expect_rows 6
  expect_err '^# progress: 1/6 steps done \(last 2 B\), [0-9]+ s$'
  grep -q progress "$TMP/out" && fail "the progress line went to stdout"
  perf 2 send_lat -s 64 -D 0.2
  expect_rc 0
  expect_rows 1
  rows | awk '$2 < 10 { bad = 1 } END { exit bad }' || fail "too few round trips in 0.2 s"
}

# perftest's form without a launcher: `MODE` serves, `MODE HOST` connects.
# The server draws its token and prints it; the client must give it.
server_token() {
  local i
  for i in $(seq 100); do
    grep -oE 'GREX_JOB_TOKEN=[0-9a-f]{32}' "$TMP/server" 2>/dev/null | head -1 | cut -d= -f2 | grep . && return 0
    sleep 0.1
  done
  return 1
}

case_server_client() {
  # Below the ephemeral range (32768 and up), where other tests' stores and
  # connections take ports; a port another process holds anyway is retried.
  local port=$((20000 + RANDOM % 12000)) mode srv token try
  for mode in write_bw send_bw send_lat; do
    for try in 1 2 3 4 5; do
      env -u GREX_JOB_TOKEN "$GREX_PERF" "$mode" -s 8K -n 100 -p "$port" >"$TMP/server" 2>&1 &
      srv=$!
      token=$(server_token) && break
      wait "$srv" 2>/dev/null
      grep -q 'address already in use' "$TMP/server" || break
      port=$((20000 + RANDOM % 12000))
    done
    [ -n "$token" ] || fail "$mode: the server printed no token: $(cat "$TMP/server")"
    if [ "$mode" = write_bw ]; then  # a wrong token is refused by the store; the server keeps waiting
      GREX_JOB_TOKEN=not-$token GREX_BOOTSTRAP_TIMEOUT_MS=3000 "$GREX_PERF" "$mode" -s 8K -n 10 -p "$port" 127.0.0.1 \
        >"$TMP/out" 2>"$TMP/err"
      RC=$?
      expect_rc 1
      expect_err 'token'
    fi
    GREX_JOB_TOKEN=$token "$GREX_PERF" "$mode" -s 8K -n 100 -p "$port" 127.0.0.1 >"$TMP/out" 2>"$TMP/err"
    RC=$?
    wait "$srv" || fail "$mode: the server exited with $?: $(cat "$TMP/server")"
    expect_rc 0
    expect_rows 1
    expect_grep 'Ranks +: client \(rank 0\)'
    grep -q 'Ranks *: server (rank 1)' "$TMP/server" || fail "$mode: the server did not print its preamble"
    port=$((port + 1))
  done
  # send_bw's server measures what it received.
  grep -qE '^ 8192 +100 ' "$TMP/server" || true
  # A client without the token is told where to get it.
  env -u GREX_JOB_TOKEN "$GREX_PERF" write_bw -s 8K -n 10 -p "$port" 127.0.0.1 >"$TMP/out" 2>"$TMP/err"
  RC=$?
  expect_rc 1
  expect_err 'the token the server printed'
  # A client with no server gives up with a clear error.
  GREX_JOB_TOKEN=x GREX_BOOTSTRAP_TIMEOUT_MS=1500 "$GREX_PERF" write_bw -s 8K -n 10 -p "$port" 127.0.0.1 >"$TMP/out" 2>"$TMP/err"
  RC=$?
  expect_rc 1
  expect_err "127.0.0.1:$port"
}

# --json: the environment block and one object per row, checked with Python's json.
case_json_schema() {
  perf 2 allreduce -b 8 -e 64K -f 8 -n 2 -w 1 --json "$TMP/coll.json"
  expect_rc 0
  perf 2 write_lat -a -e 256 -n 20 --json "$TMP/lat.json"
  expect_rc 0
  perf 2 send_bw -s 4K -n 20 --json "$TMP/bw.json"
  expect_rc 0
  python3 - "$TMP" <<'PY' || fail "JSON does not match the schema"
import json, sys
d = sys.argv[1]
env_keys = {"grex_version": str, "dpdk_version": str, "libibverbs_version": str, "drivers_built": str,
            "kernel": str, "cpu": str, "cpus_online": int, "time_utc": str, "command": str, "ranks": int,
            "backend": str, "device": str, "link_speed_mbps": int, "mtu_bytes": int, "queue_depth": int,
            "max_message_bytes": int, "buffers": str, "cc": str, "iterations": int}
rows = {
    "coll": {"size": int, "count": int, "type": str, "redop": str, "placement": str, "time_us": float,
             "algbw_gbs": float, "busbw_gbs": float, "wrong": int},
    "lat": {"bytes": int, "iterations": int, "t_min_us": float, "t_max_us": float, "t_typical_us": float,
            "t_avg_us": float, "t_stdev_us": float, "p99_us": float, "p999_us": float},
    "bw": {"bytes": int, "iterations": int, "bw_peak_gbs": float, "bw_avg_gbs": float, "msg_rate_mpps": float},
}
want_rows = {"coll": 10, "lat": 8, "bw": 1}  # 5 sizes x 2 placements; 2..256 B; one size
for name, schema in rows.items():
    doc = json.load(open(f"{d}/{name}.json"))
    assert doc["mode"] in ("allreduce", "write_lat", "send_bw"), doc["mode"]
    env = doc["environment"]
    for k, t in env_keys.items():
        assert isinstance(env[k], t), (name, k, env.get(k))
    assert env["backend"] == "shm" and env["ranks"] == 2, env
    assert env["command"].startswith("grex-perf " + doc["mode"]), env["command"]
    assert len(doc["rows"]) == want_rows[name], (name, len(doc["rows"]))
    for r in doc["rows"]:
        for k, t in schema.items():
            assert isinstance(r[k], t) or (t is float and isinstance(r[k], int)), (name, k, r)
print("schema ok")
PY
}

# --plot draws a PNG with gnuplot, or says clearly that gnuplot is missing.
case_plot() {
  perf 2 allreduce -b 8 -e 1M -f 8 -n 2 -w 1 --plot "$TMP/ar.png"
  if command -v gnuplot >/dev/null; then
    expect_rc 0
    [[ $(head -c 8 "$TMP/ar.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "allreduce: not a PNG"
    perf 2 write_bw -a -e 64K -n 20 --plot "$TMP/bw.png"
    expect_rc 0
    [[ -s $TMP/bw.png ]] || fail "write_bw: no PNG"
  else
    expect_rc 1
    expect_err 'needs gnuplot'
  fi
}

# The -c check is real: a rank that spoils one element of its output makes
# every row report it and the run fail.
case_check_detects_corruption() {
  GREX_PERF_CORRUPT_RANK=1 perf 3 allreduce -b 64 -e 4K -f 8 -n 2 -w 1
  expect_rc 1
  expect_rows 3
  rows | awk '$8 != "1" || $12 != "1" { bad = 1 } END { exit bad }' || fail "a row does not count the spoilt element"
  expect_grep '^# Out of bounds values : 6 FAILED$'
  GREX_PERF_CORRUPT_RANK=0 perf 2 reduce_scatter -b 64 -e 64 -n 1 -w 0 -d int64
  expect_rc 1
  expect_grep 'FAILED$'
}

# --backend and --cc win over GREX_BACKEND and GREX_CC (grex-perf passes them
# in CommOptions and DeviceOptions, not the environment); the variables still
# apply where the command line names nothing.
case_options_over_env() {
  GREX_BACKEND=nosuch perf 2 allreduce -b 8 -e 8 -n 1 -w 0 --backend shm
  expect_rc 0
  GREX_BACKEND=nosuch perf 2 allreduce -b 8 -e 8 -n 1 -w 0
  expect_rc 1
  expect_err "unknown driver 'nosuch'"
  GREX_BACKEND=nosuch perf 2 send_bw -s 64 -n 10 --backend shm
  expect_rc 0
  GREX_CC=timely perf 2 send_bw -s 64 -n 10 --cc swift --json "$TMP/cli.json"
  expect_rc 0
  expect_grep '^ CC +: swift$'
  GREX_CC=timely perf 2 allreduce -b 8 -e 8 -n 1 -w 0 --json "$TMP/env.json"
  expect_rc 0
  python3 - "$TMP/cli.json" "$TMP/env.json" <<'PY' || fail "cc in the JSON environment"
import json, sys
cli, env = (json.load(open(f))["environment"]["cc"] for f in sys.argv[1:])
assert (cli, env) == ("swift", "timely"), (cli, env)
PY
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
  # --use_cuda: collectives only, not with --alloc; without a GPU it says so
  # (tests/gpu/device-check.sh runs it on one).
  "$GREX_PERF" send_bw --use_cuda >"$TMP/out" 2>"$TMP/err"
  RC=$?
  expect_rc 2
  expect_err '--use_cuda does not apply to send_bw'
  "$GREX_PERF" allreduce --use_cuda --alloc >"$TMP/out" 2>"$TMP/err"
  RC=$?
  expect_rc 2
  expect_err '--use_cuda and --alloc exclude each other'
  if ! nvidia-smi -L > /dev/null 2>&1; then
    perf 2 allreduce -b 1K -e 1K -n 2 -w 0 --use_cuda
    expect_rc 1
    expect_err 'grex-perf --use_cuda.*no CUDA driver'
  fi
}

"case_$CASE" || exit 1
echo "PASS [$CASE]"

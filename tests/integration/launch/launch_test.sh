#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex-run behaviour tests: one case per invocation, `launch_test.sh CASE GREX_RUN STORE_CLIENT`.
set -u

CASE=$1
GREX_RUN=$2
STORE_CLIENT=${3:-}
GREX_STORE_BIN=${4:-}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/grex-launch.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$TMP"/out "$TMP"/err; do
    [[ -f $f ]] && { echo "--- ${f##*/}:" >&2; cat "$f" >&2; }
  done
  exit 1
}

now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

# Runs grex-run with the given args; sets RC and ELAPSED_MS, output in $TMP/out and $TMP/err.
launch() {
  local start
  start=$(now_ms)
  "$GREX_RUN" "$@" >"$TMP/out" 2>"$TMP/err"
  RC=$?
  ELAPSED_MS=$(( $(now_ms) - start ))
}

expect_rc() { [[ $RC -eq $1 ]] || fail "exit code $RC, expected $1"; }
expect_faster_than() { (( ELAPSED_MS < $1 )) || fail "took ${ELAPSED_MS} ms, expected < $1 ms"; }
expect_line() { grep -qxF -- "$2" "$TMP/$1" || fail "no line '$2' in $1"; }
expect_grep() { grep -qE -- "$2" "$TMP/$1" || fail "nothing matches /$2/ in $1"; }
expect_no_grep() { ! grep -qE -- "$2" "$TMP/$1" || fail "unexpected /$2/ in $1"; }

# A pid counts as gone once it is missing or a zombie (a container's init may not reap).
alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $state && $state != Z ]]
}

# Waits up to 2 s for every pid listed in the given files to be gone.
expect_gone() {
  local pid deadline=$(( $(now_ms) + 2000 ))
  for pid in $(cat "$@"); do
    while alive "$pid"; do
      (( $(now_ms) < deadline )) || fail "pid $pid still running after grex-run exited"
      sleep 0.05
    done
  done
}

case_env() {
  unset GREX_BACKEND  # expect the default
  launch -n 4 -- bash -c 'echo "rank=$GREX_RANK world=$GREX_WORLD_SIZE local=$GREX_LOCAL_RANK" \
    "lsize=$GREX_LOCAL_SIZE trank=$RANK tworld=$WORLD_SIZE tlocal=$LOCAL_RANK tlws=$LOCAL_WORLD_SIZE" \
    "store=$GREX_STORE_ADDR ext=$GREX_STORE_EXTERNAL master=$MASTER_ADDR:$MASTER_PORT" \
    "backend=$GREX_BACKEND token=$GREX_JOB_TOKEN job=$GREX_JOB_ID"'
  expect_rc 0
  [[ $(wc -l <"$TMP/out") -eq 4 ]] || fail "expected 4 lines of output"
  local port
  port=$(sed -n 's/.* store=127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$TMP/out" | sort -u)
  [[ $port =~ ^[0-9]+$ && $port -gt 0 ]] || fail "ranks disagree on the store port or it is missing: '$port'"
  [[ $(sed -n 's/.* token=\([0-9a-f]*\) .*/\1/p' "$TMP/out" | sort -u | wc -l) -eq 1 ]] ||
    fail "ranks got different job tokens"
  grep -qE ' token=[0-9a-f]{64} job=[0-9a-f]{16}$' "$TMP/out" || fail "token or job id malformed"
  # torch's MASTER_PORT is a port of its own: rank 0's torch store listens there.
  local mport
  mport=$(sed -n 's/.* master=127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$TMP/out" | sort -u)
  [[ $mport =~ ^[0-9]+$ && $mport -gt 0 && $mport -ne $port ]] || fail "MASTER_PORT '$mport' missing, differing or the store's"
  local r
  for r in 0 1 2 3; do
    expect_grep out "^\[$r\] rank=$r world=4 local=$r lsize=4 trank=$r tworld=4 tlocal=$r tlws=4 store=127\.0\.0\.1:$port ext=1 master=127\.0\.0\.1:$mport backend=auto "
  done
  # A second launch gets a fresh token and job id.
  local first
  first=$(sed -n 's/.* token=\([0-9a-f]*\) job=\([0-9a-f]*\)$/\1 \2/p' "$TMP/out" | head -1)
  launch -n 1 -- bash -c 'echo "$GREX_JOB_TOKEN $GREX_JOB_ID"'
  expect_rc 0
  local second=($(sed 's/^\[0\] //' "$TMP/out")) first_parts=($first)
  [[ ${second[0]} != "${first_parts[0]}" ]] || fail "two launches share a job token"
  [[ ${second[1]} != "${first_parts[1]}" ]] || fail "two launches share a job id"
}

case_backend() {
  GREX_BACKEND=tcp launch -n 2 -- bash -c 'echo "backend=$GREX_BACKEND"'
  expect_rc 0
  expect_line out "[1] backend=tcp"
  GREX_BACKEND=tcp launch -n 2 --backend verbs -- bash -c 'echo "backend=$GREX_BACKEND"'
  expect_rc 0
  expect_line out "[0] backend=verbs"
}

case_fail_fast() {
  # Every rank records its own pid and a grandchild's; rank 2 fails, the rest would sleep 60 s.
  launch -n 4 -- bash -c '
    sleep 60 & echo $! >"'"$TMP"'/pid.$GREX_RANK.child"
    echo $$ >"'"$TMP"'/pid.$GREX_RANK"
    if [[ $GREX_RANK == 2 ]]; then sleep 0.3; echo "rank 2 giving up"; exit 3; fi
    wait'
  expect_rc 3
  expect_faster_than 5000
  expect_line err "grex-run: rank 2 exited with code 3"
  expect_line out "[2] rank 2 giving up"
  [[ $(grep -c 'grex-run: rank' "$TMP/err") -eq 1 ]] || fail "expected exactly one failure line"
  expect_gone "$TMP"/pid.*
}

case_signal() {
  launch -n 3 -- bash -c 'echo $$ >"'"$TMP"'/pid.$GREX_RANK"
    if [[ $GREX_RANK == 1 ]]; then sleep 0.2; kill -KILL $$; fi; sleep 60'
  expect_rc 137
  expect_faster_than 5000
  expect_line err "grex-run: rank 1 killed by signal 9 (SIGKILL)"
  expect_gone "$TMP"/pid.*
}

case_timeout() {
  launch -n 4 --timeout 1 -- bash -c 'echo $$ >"'"$TMP"'/pid.$GREX_RANK"; sleep 60'
  expect_rc 124
  expect_faster_than 3000
  (( ELAPSED_MS >= 900 )) || fail "timed out early, after ${ELAPSED_MS} ms"
  expect_grep err '^grex-run: job timed out after 1 s .*ranks still running: 0-3$'
  expect_gone "$TMP"/pid.*
}

case_not_found() {
  launch -n 2 -- grex-no-such-program-xyz arg
  expect_rc 127
  expect_line err "grex-run: cannot execute 'grex-no-such-program-xyz': No such file or directory"
  launch -n 2 -- "$TMP/missing/prog"
  expect_rc 127
  expect_line err "grex-run: cannot execute '$TMP/missing/prog': No such file or directory"
  printf 'not a program\n' >"$TMP/data"
  launch -n 2 -- "$TMP/data"
  expect_rc 127
  expect_line err "grex-run: cannot execute '$TMP/data': Permission denied"
}

case_store() {
  [[ -x $STORE_CLIENT ]] || fail "store client '$STORE_CLIENT' not built"
  launch -n 4 --timeout 30 -- "$STORE_CLIENT"
  expect_rc 0
  local r
  for r in 0 1 2 3; do expect_line out "[$r] store_client: rank $r saw all 4 values"; done
}

case_streams() {
  launch -n 2 -- bash -c 'echo "to-out $GREX_RANK"; echo "to-err $GREX_RANK" >&2'
  expect_rc 0
  expect_line out "[0] to-out 0"
  expect_line out "[1] to-out 1"
  expect_line err "[0] to-err 0"
  expect_line err "[1] to-err 1"
  expect_no_grep out 'to-err'
  expect_no_grep err 'to-out'
}

case_output() {
  # A partial last line is flushed (and ended) at exit; --no-tag-output passes bytes through.
  launch -n 1 -- bash -c 'printf "one\ntwo\nno newline"'
  expect_rc 0
  [[ $(cat "$TMP/out") == $'[0] one\n[0] two\n[0] no newline' ]] || fail "partial line mangled"
  launch -n 2 --no-tag-output -- bash -c 'printf "raw $GREX_RANK"; echo "e" >&2'
  expect_rc 0
  [[ $(cat "$TMP/out") == "raw 0raw 1" || $(cat "$TMP/out") == "raw 1raw 0" ]] ||
    fail "--no-tag-output changed the output"
  expect_no_grep err '^\['
  # Lines from several busy ranks stay whole.
  launch -n 4 -- bash -c 'for i in $(seq 1 2000); do echo "rank $GREX_RANK line $i ........................................"; done'
  expect_rc 0
  [[ $(wc -l <"$TMP/out") -eq 8000 ]] || fail "expected 8000 lines"
  [[ $(grep -cE '^\[([0-3])\] rank \1 line [0-9]+ \.+$' "$TMP/out") -eq 8000 ]] ||
    fail "some lines are torn or carry the wrong prefix"
}

case_kill_grace() {
  # Rank 0 ignores SIGTERM (and its sleeps inherit that): only SIGKILL after the grace stops it.
  launch -n 2 --kill-grace 0.5 -- bash -c 'trap "" TERM; echo $$ >"'"$TMP"'/pid.$GREX_RANK"
    if [[ $GREX_RANK == 1 ]]; then sleep 0.2; exit 1; fi
    while true; do sleep 0.1; done'
  expect_rc 1
  expect_faster_than 3000
  (( ELAPSED_MS >= 600 )) || fail "SIGKILL came before the grace period, after ${ELAPSED_MS} ms"
  expect_line err "grex-run: rank 1 exited with code 1"
  expect_grep err 'grex-run: ranks 0 still running 0.5 s .*sending SIGKILL'
  expect_gone "$TMP"/pid.*
}

case_forward() {
  "$GREX_RUN" -n 2 -- bash -c 'echo $$ >"'"$TMP"'/pid.$GREX_RANK"; sleep 60' \
    >"$TMP/out" 2>"$TMP/err" &
  local launcher=$! i
  for i in $(seq 1 100); do [[ -s $TMP/pid.0 && -s $TMP/pid.1 ]] && break; sleep 0.05; done
  [[ -s $TMP/pid.0 && -s $TMP/pid.1 ]] || fail "ranks did not start"
  kill -TERM "$launcher"
  wait "$launcher" 2>/dev/null
  RC=$?
  expect_rc 143
  expect_line err "grex-run: received SIGTERM; forwarding it to ranks 0-1"
  expect_gone "$TMP"/pid.*
}

case_orphan() {
  # grex-run killed outright (no shutdown of its own): the ranks still get SIGTERM.
  # Its job file (for grex-run --status) stays behind: in this test's folder.
  XDG_RUNTIME_DIR=$TMP "$GREX_RUN" -n 2 -- bash -c 'echo $$ >"'"$TMP"'/pid.$GREX_RANK"; exec sleep 60' \
    >"$TMP/out" 2>"$TMP/err" &
  local launcher=$! i
  for i in $(seq 1 100); do [[ -s $TMP/pid.0 && -s $TMP/pid.1 ]] && break; sleep 0.05; done
  [[ -s $TMP/pid.0 && -s $TMP/pid.1 ]] || fail "ranks did not start"
  kill -KILL "$launcher"
  wait "$launcher" 2>/dev/null
  expect_gone "$TMP"/pid.*
}

case_usage() {
  local bad
  for bad in 0 -1 abc 2x 99999; do
    launch -n "$bad" -- true
    expect_rc 2
    expect_grep err "^grex-run: -n needs a number of ranks .*got '$bad'"
  done
  launch -- true
  expect_rc 2
  expect_grep err 'required'
  launch -n 2
  expect_rc 2
  launch -n 2 --frobnicate -- true
  expect_rc 2
  expect_grep err "unknown option '--frobnicate'"
  launch -n 2 --timeout soon -- true
  expect_rc 2
  launch --help
  expect_rc 0
  expect_grep out '^Usage: grex-run -n N'
}

# A standalone grex-store serves 3 ranks started by hand (as mpirun or srun
# would start them); a rank with the wrong token is refused with a clear error;
# SIGTERM stops the store cleanly.
case_standalone_store() {
  [[ -x $GREX_STORE_BIN && -x $STORE_CLIENT ]] || fail "grex-store or store client not built"
  GREX_JOB_TOKEN=secret-$$ "$GREX_STORE_BIN" --host 127.0.0.1 --port 0 >"$TMP/store.out" 2>"$TMP/store.err" &
  local store_pid=$! port="" i
  for i in $(seq 100); do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/store.out")
    [[ -n $port ]] && break
    sleep 0.05
  done
  [[ -n $port ]] || { kill "$store_pid"; fail "grex-store printed no port: $(cat "$TMP/store.out" "$TMP/store.err")"; }
  local pids=()
  for r in 0 1 2; do
    env -i PATH="$PATH" GREX_RANK=$r GREX_WORLD_SIZE=3 GREX_JOB_TOKEN=secret-$$ GREX_STORE_EXTERNAL=1 \
      GREX_STORE_ADDR=127.0.0.1:$port "$STORE_CLIENT" >"$TMP/rank$r.out" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2; do
    wait "${pids[$r]}" || { kill "$store_pid"; cat "$TMP/rank$r.out" >&2; fail "rank $r failed"; }
    grep -q "rank $r saw all 3 values" "$TMP/rank$r.out" || { kill "$store_pid"; fail "rank $r output"; }
  done
  env -i PATH="$PATH" GREX_RANK=0 GREX_WORLD_SIZE=1 GREX_JOB_TOKEN=wrong GREX_STORE_EXTERNAL=1 \
    GREX_STORE_ADDR=127.0.0.1:$port "$STORE_CLIENT" >"$TMP/bad.out" 2>&1 && { kill "$store_pid"; fail "wrong token accepted"; }
  grep -q "rejected this rank's job token" "$TMP/bad.out" || { kill "$store_pid"; cat "$TMP/bad.out" >&2; fail "no clear auth error"; }
  kill -TERM "$store_pid"
  wait "$store_pid" || fail "grex-store exited with $? on SIGTERM"
}

declare -F "case_$CASE" >/dev/null || fail "unknown case"
"case_$CASE"
echo "PASS [$CASE]"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the C API programs on real jobs: capi_test.sh CASE GREX_RUN CAPI_RANKS C_ALLREDUCE
#   grex_run_1 / grex_run_3   capi_ranks under grex-run with 1 and 3 ranks
#   init_rank                 two capi_ranks given rank, world, store and token explicitly
#   mpirun                    4 ranks under Open MPI through the env adapter (skips without mpirun)
#   example                   examples/c/allreduce.c under grex-run -n 4
set -u
CASE=$1 GREX_RUN=$2 RANKS=$3 EXAMPLE=$4
fail() { echo "FAIL [$CASE]: $*" >&2; exit 1; }
case $CASE in
  grex_run_1) out=$("$GREX_RUN" -n 1 --no-tag-output -- "$RANKS") || fail "exit $?"
              [[ $out == *"every call passed on 1 ranks"* ]] || fail "no pass line: $out" ;;
  # 3 ranks with receives from any source on (grex_recv_any, grex_iprobe).
  grex_run_3) out=$(GREX_P2P_ANY_SOURCE=1 "$GREX_RUN" -n 3 --no-tag-output -- "$RANKS") || fail "exit $?"
              [[ $out == *"every call passed on 3 ranks"* ]] || fail "no pass line: $out" ;;
  init_rank)
    # The port is random, and may be taken (the range overlaps the kernel's
    # ephemeral ports): rank 0 then says address-in-use, and we try another.
    for try in 1 2 3 4 5; do
      port=$((30000 + RANDOM % 20000)) token="capi-$$-$RANDOM"
      "$RANKS" 1 2 "127.0.0.1:$port" "$token" &
      r1=$!
      out=$("$RANKS" 0 2 "127.0.0.1:$port" "$token" 2>"${TMPDIR:-/tmp}/capi-init-$$.err") && break
      rc=$? err=$(cat "${TMPDIR:-/tmp}/capi-init-$$.err")
      kill "$r1" 2>/dev/null
      wait "$r1" 2>/dev/null
      [[ $err == *address-in-use* && $try -lt 5 ]] || { rm -f "${TMPDIR:-/tmp}/capi-init-$$.err"; echo "$err" >&2; fail "rank 0 exited $rc"; }
      echo "port $port is taken; trying another" >&2
    done
    rm -f "${TMPDIR:-/tmp}/capi-init-$$.err"
    wait "$r1" || fail "rank 1 exited $?"
    [[ $out == *"every call passed on 2 ranks"* ]] || fail "no pass line: $out" ;;
  mpirun)
    command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) is not installed"; exit 77; }
    out=$(mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,vader \
      -x GREX_JOB_TOKEN=capi-mpi-$$ -x GREX_STORE_ADDR=127.0.0.1:$((30000 + RANDOM % 20000)) "$RANKS" 2>&1) ||
      fail "mpirun exited $?: $out"
    [[ $out == *"every call passed on 4 ranks"* ]] || fail "no pass line: $out" ;;
  example) out=$("$GREX_RUN" -n 4 --no-tag-output -- "$EXAMPLE") || fail "exit $?"
           [[ $out == *"averaged 1048576 floats over 4 ranks: 0 2.5 5"* ]] || fail "unexpected output: $out" ;;
  *) fail "unknown case" ;;
esac
echo "PASS [$CASE]"

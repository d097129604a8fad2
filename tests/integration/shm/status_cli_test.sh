#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 30: `grex-run --status` and `grex-status HOST:PORT` on a 4-rank job
# where rank 2 sleeps 4 s before its 10th allreduce: both name rank 2 as the
# straggler and show ranks 0, 1 and 3 in allreduce #10 waiting on it (text
# and --json); each waiting rank warns once; a wrong token is refused; with
# the job gone --status says so.
#   status_cli_test.sh GREX_RUN GREX_STATUS STRAGGLER_JOB
set -u
GREX_RUN=$1 GREX_STATUS_BIN=$2 JOB=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A job folder of this test's own, so other jobs of this user stay out of it.
export XDG_RUNTIME_DIR="$work"
fail() { echo "FAIL: $*"; for f in "$work"/*.txt; do echo "--- $f"; cat "$f"; done; exit 1; }

GREX_WARN_AFTER_MS=1000 "$GREX_RUN" -n 4 --timeout 60 -- "$JOB" 2 10 4000 12 > "$work/job.txt" 2>&1 &
job=$!
found=0
for _ in $(seq 1 80); do
  "$GREX_RUN" --status > "$work/status.txt" 2>&1
  rc=$?
  if grep -q "stragglers: rank 2$" "$work/status.txt" && [ "$(grep -c 'waiting on rank 2' "$work/status.txt")" = 3 ]; then
    found=1
    break
  fi
  sleep 0.1
done
[ $found = 1 ] || fail "grex-run --status never named rank 2 as the straggler with three ranks waiting on it"
[ $rc = 0 ] || fail "grex-run --status exited $rc with every rank answering"
for r in 0 1 3; do
  grep -E "^  rank $r .*in allreduce count=16 f32 sum \(#10\) for [0-9]+ ms, waiting on rank 2; 9 collectives done" \
    "$work/status.txt" > /dev/null || fail "rank $r's line"
done
grep -E "^  rank 2 .*out of grex for [0-9]+ ms \(after allreduce count=16 f32 sum #9\); 9 collectives done" \
  "$work/status.txt" > /dev/null || fail "rank 2's line"
grep -q "not answering: none" "$work/status.txt" || fail "not answering"

"$GREX_RUN" --status --json > "$work/status_json.txt" 2>&1 || fail "--status --json"
python3 - "$work/status_json.txt" <<'PY' || fail "--json"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["communicators"][0]
assert c["size"] == 4 and c["stragglers"] == [2] and c["silent"] == [], c
for r in c["ranks"]:
    assert r["answered"], r
    if r["rank"] == 2:
        assert r["state"] == "done" and r["colls_done"] == 9, r
    else:
        assert r["state"] == "running" and r["coll"] == 10 and 2 in r["waiting_on"], r
PY

# grex-status, as for a job started by mpirun or srun: the address and token of this job.
jobfile=$(ls "$work"/grex/*.job)
addr=$(sed -n 1p "$jobfile")
token=$(sed -n 2p "$jobfile")
[ "$(stat -c %a "$jobfile")" = 600 ] || fail "the job file is not 0600"
GREX_JOB_TOKEN=$token "$GREX_STATUS_BIN" "$addr" > "$work/grex_status.txt" 2>&1 || fail "grex-status exited $?"
grep -q "stragglers: rank 2$" "$work/grex_status.txt" || fail "grex-status did not name rank 2"
GREX_JOB_TOKEN=wrong "$GREX_STATUS_BIN" --timeout-ms 2000 "$addr" > "$work/wrong.txt" 2>&1
[ $? = 1 ] || fail "grex-status with a wrong token did not exit 1"
grep -qi "token" "$work/wrong.txt" || fail "the wrong token's error does not say token"

wait $job || fail "the job exited $?"
[ "$(grep -c '(GREX_WARN_AFTER_MS)' "$work/job.txt")" = 3 ] || fail "expected one warning from each of ranks 0, 1, 3"
for r in 0 1 3; do
  grep -E "^\[$r\] .*allreduce #10: .* has waited 1000 ms for rank 2 \(GREX_WARN_AFTER_MS\): rank 2 is alive, not in the collective" \
    "$work/job.txt" > /dev/null || fail "rank $r's warning"
done
"$GREX_RUN" --status > "$work/after.txt" 2>&1
[ $? = 1 ] && grep -q "no grex-run job of this user is running" "$work/after.txt" || fail "--status after the job"
echo "status_cli: ok"

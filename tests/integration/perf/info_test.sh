#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# grex-info on this host, whatever it has: every section is printed, the JSON
# parses and names every backend, --backend shm always succeeds, --backend
# verbs and cuda succeed exactly when their JSON says "usable", usage errors
# exit 2, and exit 1 comes with the reason on stderr.
#   info_test.sh GREX_INFO
set -u
info=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/grex-info-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/out "$TMP"/err; do [[ -f $f ]] && { echo "--- ${f##*/}:" >&2; cat "$f" >&2; }; done
  exit 1
}
run() { "$info" "$@" >"$TMP/out" 2>"$TMP/err"; RC=$?; }

run
((RC == 0 || RC == 1)) || fail "grex-info exited $RC"
for s in shm verbs dpdk cuda; do grep -qE "^$s: " "$TMP/out" || fail "no $s section"; done
if ((RC == 1)); then grep -q 'no backend that reaches other hosts' "$TMP/err" || fail "exit 1 without a reason"; fi

run --json "$TMP/all.json"
python3 - "$TMP/all.json" "$RC" <<'PY' || fail "JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
for k in ("grex_version", "drivers_built", "shm", "verbs", "dpdk", "cuda", "usable"):
    assert k in doc, k
for s in ("shm", "verbs", "dpdk", "cuda"):
    assert isinstance(doc[s]["usable"], bool) and isinstance(doc[s]["summary"], str), s
assert doc["shm"]["usable"], doc["shm"]
assert isinstance(doc["dpdk"]["hugepages"], list) and isinstance(doc["dpdk"]["netdevs"], list)
assert doc["usable"] == (sys.argv[2] == "0"), (doc["usable"], sys.argv[2])
net = doc["verbs"]["usable"] or doc["dpdk"]["usable"]
assert doc["usable"] == net, doc["usable"]
PY

run --backend shm --json -
((RC == 0)) || fail "--backend shm exited $RC"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert set(d) == {"grex_version","drivers_built","shm","usable"}, d' \
  "$TMP/out" || fail "--backend shm --json - is not one JSON document with only shm"

for b in verbs cuda; do
  run --backend "$b" --json -
  usable=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))[sys.argv[2]]["usable"]))' "$TMP/out" "$b") ||
    fail "--backend $b: no JSON"
  if ((usable)); then ((RC == 0)) || fail "--backend $b usable but exit $RC"
  else
    ((RC == 1)) || fail "--backend $b not usable but exit $RC"
    grep -q "grex-info: $b has nothing usable: " "$TMP/err" || fail "--backend $b: no reason on stderr"
  fi
done

run --backend ib
((RC == 2)) || fail "unknown backend: exit $RC"
grep -q "unknown backend 'ib'" "$TMP/err" || fail "unknown backend not named"
run --json
((RC == 2)) || fail "--json without a value: exit $RC"
run --help
((RC == 0)) && grep -q '^Usage: grex-info' "$TMP/out" || fail "--help"
echo "PASS [grex-info]"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a libFuzzer binary for a bounded number of inputs, starting from its
# seed corpus, without writing into the source tree: new inputs go to a
# temporary directory, crash reproducers to ARTIFACT_DIR.
# Usage: run_fuzz.sh FUZZER SEED_DIR ARTIFACT_DIR [libFuzzer flags...]
set -u
[[ $# -ge 3 ]] || { echo "usage: $0 FUZZER SEED_DIR ARTIFACT_DIR [flags...]"; exit 2; }
fuzzer=$1 seeds=$2 artifacts=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/grex-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
set -o pipefail
mkdir -p "$artifacts"
"$fuzzer" -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" "$work" "$seeds" 2>&1 | tee "$work/log"
rc=${PIPESTATUS[0]}
# One summary line: how much was tried, for the log and CI.
execs=$(awk '/stat::number_of_executed_units:/ {print $2}' "$work/log" | tail -1)
edges=$(grep -oE 'cov: [0-9]+' "$work/log" | tail -1 | awk '{print $2}')
echo "fuzz: $(basename "$fuzzer"): ${execs:-0} executions, ${edges:-0} coverage edges, exit $rc"
if ((rc != 0)); then
  echo "FAIL: $fuzzer exited $rc; reproducer (crash-*, timeout-*, oom-*) in $artifacts;"
  echo "replay with: GREX_FUZZ_TRACE=1 $fuzzer $artifacts/crash-<hash>"
fi
# libFuzzer exits 77 on a finding, which meson would read as a skip
((rc == 0)) || exit 1
exit 0

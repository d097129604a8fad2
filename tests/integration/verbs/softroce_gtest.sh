#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a GoogleTest binary under tests/scripts/softroce.sh for a meson test with
# protocol 'gtest' (meson appends --gtest_output=xml:NAME.xml, relative to the
# build dir; the VM shares that dir read-write at the same path, so the binary's
# report lands where meson reads it).
#
#   softroce_gtest.sh SOFTROCE_SH EXE [ARGS...]
#
# On a host that already has an active RDMA port (a NIC, a configured rxe, or
# inside the Soft-RoCE VM) the binary runs directly on it instead.
# Exit status: the binary's, or softroce.sh's (77 = no Soft-RoCE here: meson
# counts a skip); 1 when the status says success but the report is missing or
# lists failures (meson judges a gtest test by its exit status alone).
set -euo pipefail
(($# >= 2)) || { echo "usage: softroce_gtest.sh SOFTROCE_SH EXE [ARGS...]" >&2; exit 2; }
softroce=$1
shift

# meson parses NAME.xml whenever the file exists: a report left by an earlier
# run would be counted again if this one ends (e.g. skips) before the binary writes.
xml=""
for arg in "$@"; do
  case "$arg" in --gtest_output=xml:*) xml=${arg#--gtest_output=xml:}; rm -f -- "$xml" ;; esac
done

rc=0
direct=""
for state in /sys/class/infiniband/*/ports/*/state; do
  if [[ -r "$state" ]] && grep -q ACTIVE "$state"; then
    direct=${state#/sys/class/infiniband/}
    direct=${direct%%/*}
    break
  fi
done
if [[ -n "$direct" ]]; then
  echo "softroce_gtest: the host has an active RDMA port ($direct): running directly"
  "$@" || rc=$?
else
  "$softroce" -- "$@" || rc=$?
fi
if [[ "$rc" == 0 && -n "$xml" ]]; then
  if [[ ! -s "$xml" ]]; then
    echo "softroce_gtest: FAIL: status 0 but no report $xml (did the command run? is the build dir shared?)" >&2
    exit 1
  fi
  head=$(grep -o -m1 '<testsuites [^>]*' "$xml" || true)
  if [[ "$head" =~ failures=\"([0-9]+)\" ]] && ((BASH_REMATCH[1] > 0)); then
    echo "softroce_gtest: FAIL: status 0 but $xml lists ${BASH_REMATCH[1]} failed case(s)" >&2
    exit 1
  fi
fi
exit "$rc"

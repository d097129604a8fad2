#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints the line and branch coverage that a test run left in a coverage build
(meson -Db_coverage=true): one row per part of the tree (lib/, drivers/,
congestion/, apps/) and a total, from gcovr's JSON summary. Branches the
compiler adds for exceptions and ones it can prove unreachable are left out.
  coverage.py SOURCE_ROOT BUILD_DIR"""
import json
import os
import subprocess
import sys

PARTS = ["lib", "drivers", "congestion", "apps"]

root, build = (os.path.abspath(p) for p in sys.argv[1:3])
out = os.path.join(build, "coverage-summary.json")
cmd = ["gcovr", "--root", root, "--object-directory", build, "--json-summary", out,
       "--exclude-throw-branches", "--exclude-unreachable-branches", "-j", str(os.cpu_count() or 1)]
for part in PARTS:
    cmd += ["--filter", os.path.join(root, part) + "/"]
res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
if res.returncode != 0:
    sys.exit(f"coverage: gcovr failed ({res.returncode}): {res.stderr.strip()[-2000:]}")

rows = {part: [0, 0, 0, 0] for part in PARTS}  # lines covered, lines, branches covered, branches
with open(out) as f:
    for entry in json.load(f)["files"]:
        part = entry["filename"].split("/", 1)[0]
        if part in rows:
            for i, key in enumerate(["line_covered", "line_total", "branch_covered", "branch_total"]):
                rows[part][i] += entry[key]
rows["total"] = [sum(r[i] for r in rows.values()) for i in range(4)]


def pct(covered, total):
    return f"{100.0 * covered / total:5.1f}%" if total else "    -"


print(f"{'coverage':<12} {'lines':>18} {'branches':>18}")
for name, (lc, lt, bc, bt) in rows.items():
    label = name if name == "total" else name + "/"
    print(f"{label:<12} {pct(lc, lt)} {lc:>5}/{lt:<5} {pct(bc, bt)} {bc:>5}/{bt:<5}")
rel = os.path.relpath(build, root)
print(f"coverage: per file: gcovr -r . --object-directory {rel} --filter lib/ (-b: branches)")

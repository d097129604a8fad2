#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Counts test cases in a meson build's JUnit log and prints one closing line:
'N passed, N failed, N skipped'. A GoogleTest executable counts per test case;
any other test counts once. A test meson saw fail (crash, timeout) whose
cases all look fine is counted as one failure, so nothing fails silently."""
import json
import sys
import xml.etree.ElementTree as ET

build = sys.argv[1]
passed = failed = skipped = 0
failing = []
root = ET.parse(f"{build}/meson-logs/testlog.junit.xml").getroot()
bad_suites = set()
for suite in root.iter("testsuite"):
    for case in suite.iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed += 1
            failing.append(f"{suite.get('name')}.{case.get('name')}")
            bad_suites.add(f"{suite.get('name')}.{case.get('name')}")
        elif "skipped" in kinds or case.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1

def why(out):
    """A few lines that say why a test failed: GoogleTest's failure messages
    (each with the lines after it), else the output's last lines. CI shows
    only the tail of a run's output, so these go just above the closing line."""
    lines = [l for l in (out or "").splitlines() if l.strip()]
    picked = []
    for i, l in enumerate(lines):
        if l.endswith(": Failure"):
            picked += lines[i:i + 4]
            if len(picked) >= 12:
                break
    return (picked or lines[-12:])[:12]


reasons = []
with open(f"{build}/meson-logs/testlog.json") as f:
    for line in f:
        t = json.loads(line)
        if t.get("result") in ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"):
            name = t.get("name", "?")
            reasons.append((f"{name} ({t.get('result')}, {t.get('duration', 0):.0f} s)", why(t.get("stdout"))))
            if not any(s.endswith(name) or name in s for s in bad_suites):
                failed += 1
                failing.append(f"{name} ({t.get('result')})")
for name, lines in reasons:
    print(f"--- why {name}:")
    for l in lines:
        print(f"    {l[:200]}")
for name in failing:
    print(f"FAILED: {name}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)

#!/usr/bin/env python3
"""Prints the summary that ends `make test`: every stage and every test suite in it, with its
time and result; every skipped suite or test case with its reason.

  scripts/test_summary.py RESULTS_DIR

RESULTS_DIR holds stages.tsv (one line per stage: name, exit code, seconds, and the JUnit file
of a ctest stage) as scripts/ci_test.sh writes it. The last line is the plain count of suites,
"summary: N passed, N failed, N skipped" (stages that are not ctest runs count as one each).
"""
import os
import re
import sys
import xml.etree.ElementTree as ElementTree

GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] ([A-Za-z_][\w/.]*) \(\d+ ms\)")


def gtest_skips(output):
    """The test cases a GoogleTest binary skipped, each with the message GTEST_SKIP gave."""
    skips = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        match = GTEST_SKIPPED.match(line)
        if not match:
            continue
        reason = ""
        for back in range(i - 1, max(i - 6, -1), -1):
            if lines[back].endswith("Skipped") and back + 1 < i:
                reason = lines[back + 1].strip()
                break
        skips.append((match[1], reason))
    return skips


def skip_reason(case):
    """A skipped ctest entry's reason: its 'skipped: ...' line, or the CTest message."""
    output = case.findtext("system-out") or ""
    for line in output.splitlines():
        if line.lower().startswith("skipped"):
            return line.strip()
    skipped = case.find("skipped")
    return skipped.get("message", "") if skipped is not None else ""


def ctest_rows(junit):
    rows = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        status = {"run": "passed", "fail": "FAILED", "notrun": "skipped"}.get(
            case.get("status"), case.get("status"))
        note = skip_reason(case) if status == "skipped" else ""
        if status == "passed":
            skips = gtest_skips(case.findtext("system-out") or "")
            if skips:
                note = "; ".join(f"{name} skipped: {reason}" for name, reason in skips)
        rows.append((case.get("name"), status, float(case.get("time", 0)), note))
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    results = sys.argv[1]
    counts = {"passed": 0, "FAILED": 0, "skipped": 0}
    print("\n== make test: summary ==")
    print(f"{'stage / suite':<40} {'result':<8} {'time':>8}")
    total = 0
    with open(os.path.join(results, "stages.tsv")) as stages:
        for line in stages:
            name, code, seconds, junit = (line.rstrip("\n").split("\t") + [""])[:4]
            total += int(seconds)
            status = "passed" if code == "0" else "FAILED"
            print(f"{name:<40} {status:<8} {int(seconds):>7}s")
            if junit and os.path.exists(junit):
                for suite, suite_status, suite_seconds, note in ctest_rows(junit):
                    counts[suite_status] = counts.get(suite_status, 0) + 1
                    print(f"  {suite:<38} {suite_status:<8} {suite_seconds:>7.1f}s"
                          + (f"  ({note})" if note else ""))
            elif junit:
                counts["FAILED"] += 1
                print(f"  (no results: {junit} was not written)")
            else:
                counts[status] += 1
    print(f"{'total':<40} {'':<8} {total:>7}s")
    print(f"summary: {counts['passed']} passed, {counts['FAILED']} failed, "
          f"{counts['skipped']} skipped")


if __name__ == "__main__":
    main()

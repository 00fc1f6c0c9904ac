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
GTEST_SKIP_AT = re.compile(r"^.*:\d+: Skipped$")
GTEST_NONE_PASSED = re.compile(r"^\[  PASSED  \] 0 tests\.")
# The CTest messages of a test it skipped on purpose; any other "notrun" (executable missing, a
# fixture failed) is a failure: ctest itself counts it as one.
CTEST_SKIPS = ("SKIP_RETURN_CODE", "SKIP_REGULAR_EXPRESSION")
NO_REASON = "no reason given"
GTEST_FAILURE_AT = re.compile(r"^.*:\d+: Failure$")
GTEST_FAILED = re.compile(r"^\[  FAILED  \] [A-Za-z_][\w/.]* \(\d+ ms\)")
# A failure's lines kept for the digest: CI shows only the end of a long log, so the summary
# repeats why each failed suite failed (its failing cases and their first assertion lines, or
# the end of its output when it died before GoogleTest could report).
DIGEST_LINES, TAIL_LINES = 6, 15


def gtest_skips(output):
    """The test cases a GoogleTest binary skipped, each with the message GTEST_SKIP gave (its
    lines joined), found between the case's "file:line: Skipped" and "[  SKIPPED ]" lines."""
    skips = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        match = GTEST_SKIPPED.match(line)
        if not match:
            continue
        message = []
        for back in range(i - 1, max(i - 20, -1), -1):
            if lines[back].startswith("[ RUN      ]"):
                break
            if GTEST_SKIP_AT.match(lines[back]):
                message = [text.strip() for text in lines[back + 1:i] if text.strip()]
                break
        skips.append((match[1], " ".join(message) or NO_REASON))
    return skips


def failure_digest(output):
    """Why a suite failed, in a few lines: each GoogleTest assertion that failed with the lines
    after it and the failed cases' names, or the end of the output when there are none (a crash,
    an abort, a timeout)."""
    lines = [line for line in output.splitlines() if "WARN pid" not in line]
    digest = []
    for i, line in enumerate(lines):
        if GTEST_FAILURE_AT.match(line):
            for after in lines[i:i + DIGEST_LINES]:
                if after.startswith("[") and after is not line:
                    break  # the case's end, or the next case
                digest.append(after)
        elif GTEST_FAILED.match(line) and line not in digest:
            digest.append(line)
    return digest or lines[-TAIL_LINES:]


def skip_reason(case):
    """A skipped ctest entry's reason: what follows 'skipped:' in its output (the convention of
    the suites that exit 77), or else the CTest message."""
    output = case.findtext("system-out") or ""
    for line in output.splitlines():
        if line.lower().startswith("skipped"):
            return line.strip()[len("skipped"):].lstrip(": ") or NO_REASON
    skipped = case.find("skipped")
    message = skipped.get("message", "") if skipped is not None else ""
    return f"{message}, {NO_REASON}" if message else NO_REASON


def ctest_rows(junit):
    """(suite, status, seconds, note, skips, digest) per ctest entry; skips lists (what, reason)
    for the suite itself or for each GoogleTest case it skipped; digest is failure_digest's
    lines for a failed suite."""
    rows = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name, status, output = case.get("name"), case.get("status"), case.findtext("system-out")
        output = output or ""
        note, skips, digest = "", [], []
        if status in ("run", "fail"):
            status = "passed" if status == "run" else "FAILED"
            digest = failure_digest(output) if status == "FAILED" else []
            cases = gtest_skips(output)
            skips = [(f"{name} {test}", reason) for test, reason in cases]
            if cases:
                note = "; ".join(f"{test} skipped: {reason}" for test, reason in cases)
                # Every case skipped and none passed: the suite as a whole did not run.
                if status == "passed" and any(
                        GTEST_NONE_PASSED.match(line) for line in output.splitlines()):
                    status = "skipped"
        elif status == "notrun":
            skipped = case.find("skipped")
            message = skipped.get("message", "") if skipped is not None else ""
            if message.startswith(CTEST_SKIPS):
                reason = skip_reason(case)
                status, note = "skipped", f"skipped: {reason}"
                skips = [(name, reason)]
            else:
                status = "FAILED"
                note = f"not run: {output.strip().splitlines()[0] if output.strip() else message}"
        elif status == "disabled":
            status, note = "skipped", "disabled (the test's DISABLED property)"
            skips = [(name, note)]
        rows.append((name, status, float(case.get("time", 0)), note, skips, digest))
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    results = sys.argv[1]
    counts = {"passed": 0, "FAILED": 0, "skipped": 0}
    skipped, failures = [], []
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
                for suite, suite_status, suite_seconds, note, skips, digest in ctest_rows(junit):
                    counts[suite_status] = counts.get(suite_status, 0) + 1
                    skipped += skips
                    if digest:
                        failures.append((f"{name}: {suite}", digest))
                    print(f"  {suite:<38} {suite_status:<8} {suite_seconds:>7.1f}s"
                          + (f"  ({note})" if note else ""))
            elif junit:
                counts["FAILED"] += 1
                print(f"  (no results: {junit} was not written)")
            else:
                counts[status] += 1
    print(f"{'total':<40} {'':<8} {total:>7}s")
    # Every skip again in one place, so that none goes unnoticed in a long table.
    if skipped:
        print(f"skipped ({len(skipped)}):")
        for name, reason in skipped:
            print(f"  {name}: {reason}")
    for where, digest in failures:
        print(f"why {where} failed:")
        for line in digest:
            print(f"  {line}")
    print(f"summary: {counts['passed']} passed, {counts['FAILED']} failed, "
          f"{counts['skipped']} skipped")


if __name__ == "__main__":
    main()

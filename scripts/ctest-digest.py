#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What each failed CTest test said, short enough to sit at the end of a log.

ctest --output-on-failure prints a failed test's output where the test
ends, and a long run buries it under the tests after it; CI keeps only the
tail of the log. This reads the last run's record (Testing/Temporary) and
prints, for each failed test, the lines that name a failure and the last
lines it wrote, each line cut short.

    scripts/ctest-digest.py BUILD_DIR [--tests N] [--lines N]
"""
import argparse
import pathlib
import re
import sys

# What GoogleTest, pytest, the scripts' steps and timeouts print on a failure;
# not the word "error", which the negative tests' expected logs are full of.
FAILURE = re.compile(r"FAILED|: Failure$|CHECK\(.*\) failed|uncaught rdmx::Error|Traceback|^E   |"
                     r"AssertionError|timed out|Timeout|exit status [1-9]")
CONTEXT = 2  # lines after a failure line: GoogleTest's expected and actual values


def failed_tests(temporary):
    listing = temporary / "LastTestsFailed.log"
    if not listing.exists():
        return []
    # Lines are "NUMBER:NAME".
    return [line.split(":", 1)[1].strip() for line in listing.read_text(errors="replace").splitlines() if ":" in line]


def outputs(log_text):
    """Each test's output in LastTest.log, by name."""
    found = {}
    pattern = re.compile(r'^\d+/\d+ Test: (.+?)\n.*?^Output:\n-+\n(.*?)^<end of output>', re.M | re.S)
    for match in pattern.finditer(log_text):
        found[match.group(1)] = match.group(2).splitlines()
    return found


def cut(line, width):
    return line if len(line) <= width else line[:width] + " [...]"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--tests", type=int, default=4, help="at most this many failed tests in detail")
    parser.add_argument("--lines", type=int, default=20, help="last lines of each")
    parser.add_argument("--width", type=int, default=220)
    args = parser.parse_args()
    temporary = pathlib.Path(args.build) / "Testing" / "Temporary"
    names = failed_tests(temporary)
    if not names:
        print(f"ctest digest: no failed test recorded in {temporary}")
        return 0
    log = temporary / "LastTest.log"
    by_name = outputs(log.read_text(errors="replace")) if log.exists() else {}
    print(f"== ctest digest: {len(names)} failed; their whole output is in {log}")
    for name in names[: args.tests]:
        lines = by_name.get(name)
        if lines is None:
            print(f"-- {name}: no output recorded (killed at the timeout, or not run)")
            continue
        tail_from = max(0, len(lines) - args.lines)
        marked = []
        for i, line in enumerate(lines[:tail_from]):
            if FAILURE.search(line):
                for near in lines[i : min(i + 1 + CONTEXT, tail_from)]:
                    if near not in marked:
                        marked.append(near)
        print(f"-- {name}: {len(lines)} lines; failure lines before the tail ({len(marked)}), then the last {args.lines}")
        for line in marked[:16]:
            print("  ! " + cut(line, args.width))
        if len(marked) > 16:
            print(f"  ! ... {len(marked) - 16} more")
        for line in lines[tail_from:]:
            print("  | " + cut(line, args.width))
    if len(names) > args.tests:
        print(f"-- and {len(names) - args.tests} more: " + ", ".join(names[args.tests:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

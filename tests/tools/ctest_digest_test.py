#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/ctest-digest.py on a real ctest run: a small CMake project with a
passing test, a failing one and one killed at its timeout. The digest names
the two that failed and not the one that passed, keeps GoogleTest's failure
line with its expected and actual values, and the failing test's last lines;
after a green run it says there is nothing to show.

usage: ctest_digest_test.py
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGEST = os.path.join(ROOT, "scripts", "ctest-digest.py")

PROJECT = r"""
cmake_minimum_required(VERSION 3.16)
project(digest_probe NONE)
enable_testing()
add_test(NAME Passes COMMAND sh -c "echo all good")
add_test(NAME Fails COMMAND sh -c "echo setting up; echo 'probe.cpp:3: Failure'; echo 'Expected: 1'; echo 'Actual: 2'; echo 'unrelated 1'; echo 'unrelated 2'; i=0; while [ $i -lt 30 ]; do i=$((i+1)); echo tail line $i; done; exit 3")
add_test(NAME Hangs COMMAND sh -c "echo started; exec sleep 60")
set_tests_properties(Hangs PROPERTIES TIMEOUT 2)
"""

failures = []


def check(cond, what, text=""):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
        if text:
            print(text)


def run(args, cwd):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src, build = os.path.join(tmp, "src"), os.path.join(tmp, "build")
        os.makedirs(src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(PROJECT)
        configured = run(["cmake", "-S", src, "-B", build], tmp)
        check(configured.returncode == 0, "the probe project configures", configured.stderr)
        tested = run(["ctest", "-j", "2"], build)
        check(tested.returncode != 0, "ctest fails on the probe project", tested.stdout)
        digest = run([sys.executable, DIGEST, build, "--lines", "5"], tmp)
        out = digest.stdout
        print(out)
        check(digest.returncode == 0, "the digest exits 0", digest.stderr)
        check("2 failed" in out, "the digest counts two failed tests")
        check("-- Fails:" in out and "-- Hangs:" in out, "the digest names both failed tests")
        check("-- Passes" not in out and "all good" not in out, "the digest leaves out the passing test")
        check("! probe.cpp:3: Failure" in out, "GoogleTest's failure line is kept")
        check("! Expected: 1" in out and "! Actual: 2" in out, "the expected and actual values follow it")
        check("unrelated 2" not in out and "tail line 25" not in out, "lines that say nothing are left out")
        check("| tail line 26" in out and "| tail line 30" in out, "the last five lines are kept")
        check("started" in out, "the test killed at its timeout shows what it wrote")

        green = os.path.join(tmp, "green")
        os.makedirs(os.path.join(green, "Testing", "Temporary"))
        quiet = run([sys.executable, DIGEST, green], tmp)
        check(quiet.returncode == 0 and "no failed test recorded" in quiet.stdout,
              "after a green run the digest says there is nothing", quiet.stdout + quiet.stderr)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("ctest digest: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

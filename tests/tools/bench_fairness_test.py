#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/fairness/table.py: medians over rounds, the worst round against the
median idle time, and the burner's share against its rate alone in the same
round, from files of known content."""

import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "fairness"))
import table  # noqa: E402


def write(path, times):
    with open(path, "w") as f:
        for size, us in times.items():
            f.write(json.dumps({"bytes": size, "inplace": True, "time_us": us, "wrong": 0}) + "\n")
            f.write(json.dumps({"bytes": size, "inplace": False, "time_us": us * 100, "wrong": 0}) + "\n")


def main():
    with tempfile.TemporaryDirectory() as out:
        idle = [10.0, 12.0, 11.0]
        burst = [11.0, 110.0, 12.0]
        for r in (1, 2, 3):
            open(os.path.join(out, "alone-r%d.loops" % r), "w").write("1000 10.0")
            open(os.path.join(out, "burst-rdmx-50-r%d.loops" % r), "w").write("%d 10.0" % (500 + 100 * r))
            write(os.path.join(out, "idle-rdmx-50-r%d.jsonl" % r), {4096: idle[r - 1]})
            write(os.path.join(out, "burst-rdmx-50-r%d.jsonl" % r), {4096: burst[r - 1]})
        text = io.StringIO()
        with redirect_stdout(text):
            table.main([out])
    want = "| rdmx shm, RDMX_SPIN_US=50 | 4 KiB | 11.00 | 12.00 | 1.1x | 10.0x | 0.70 |"
    if want not in text.getvalue():
        print("FAIL: expected the row\n%s\nin\n%s" % (want, text.getvalue()))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

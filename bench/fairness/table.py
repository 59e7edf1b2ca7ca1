#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The table of bench/fairness/run.sh: usage: table.py OUT_DIR

Reads OUT_DIR/{idle,burst}-{rdmx-SPIN,mpi}-rR.jsonl (bench/run_coll.sh's
JSON lines, round R) and the burner's *.loops ("LOOPS SECONDS"). Per
configuration and size (in place): the median over the rounds of the time
per call idle and under the bursts, their ratio, and the burner's busy loops
per second beside the ranks as a fraction of its rate alone in the same
round (1.00: the ranks took nothing from it).
"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from results import size_label  # noqa: E402  (bench/results.py)


def rows(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("inplace") and r.get("wrong", 0) == 0:
                    out[r["bytes"]] = min(out.get(r["bytes"], 1e30), r["time_us"])
    except (OSError, ValueError):
        pass
    return out


def rate(path):
    try:
        loops, seconds = open(path).read().split()
        return int(loops) / float(seconds) if float(seconds) > 0 else None
    except (OSError, ValueError):
        return None


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[0]
    rounds = sorted({int(p.rsplit("-r", 1)[1][:-len(".loops")])
                     for p in glob.glob(os.path.join(out, "alone-r*.loops"))})
    configs = sorted({os.path.basename(p)[len("idle-"):].rsplit("-r", 1)[0]
                      for p in glob.glob(os.path.join(out, "idle-*-r*.jsonl"))},
                     key=lambda c: (c == "mpi", c))
    print("\n| config | size | idle us | under bursts us | slower | slower, worst round | burner's rate beside it |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for config in configs:
        idle = [rows(os.path.join(out, "idle-%s-r%d.jsonl" % (config, r))) for r in rounds]
        burst = [rows(os.path.join(out, "burst-%s-r%d.jsonl" % (config, r))) for r in rounds]
        shares = []
        for r in rounds:
            alone = rate(os.path.join(out, "alone-r%d.loops" % r))
            beside = rate(os.path.join(out, "burst-%s-r%d.loops" % (config, r)))
            shares.append(beside / alone if alone and beside else None)
        share = median(shares)
        name = config.replace("rdmx-", "rdmx shm, RDMX_SPIN_US=").replace("mpi", "Open MPI vader")
        for size in sorted(set().union(*idle, *burst)):
            i = median([x.get(size) for x in idle])
            b = median([x.get(size) for x in burst])
            # The worst round: its time under bursts against the median idle time.
            worst = max((x.get(size) for x in burst if x.get(size)), default=None)
            print("| %s | %s | %s | %s | %s | %s | %s |" % (
                name, size_label(size), "%.2f" % i if i else "n/a", "%.2f" % b if b else "n/a",
                "%.1fx" % (b / i) if i and b else "n/a", "%.1fx" % (worst / i) if i and worst else "n/a",
                "%.2f" % share if share else "n/a"))
    print("\n%d round(s); each cell is their median." % len(rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

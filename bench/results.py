# SPDX-License-Identifier: MIT
"""bench/results.py: reads what the runners of bench/common.sh leave in a
scratch directory, for the bench scripts' tables (they put bench/ on
PYTHONPATH).

A run NAME leaves NAME.json (JSON lines, one per size) and, when it failed,
NAME.why (one line: why). Scripts that repeat their sequence name each round's
runs NAME.r1, NAME.r2, ...; load() and best() take every round of a NAME, and
each figure is the best round (lowest latency, highest rate).
"""

import json
import os
import re


def _files(work, name, suffix):
    pattern = re.escape(name) + r"(\.r\d+)?" + re.escape(suffix)
    return [os.path.join(work, f) for f in sorted(os.listdir(work)) if re.fullmatch(pattern, f)]


def load(work, name):
    """Every JSON line that the runs (all rounds) of NAME left; a failed run leaves none."""
    rows = []
    for path in _files(work, name, ".json"):
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def why(work, name):
    """Why a run of NAME left no figures (the last reason given), or None."""
    reasons = []
    for path in _files(work, name, ".why"):
        with open(path) as f:
            reasons += [line.strip() for line in f if line.strip()]
    return reasons[-1] if reasons else None


def best_row(work, name, key, lowest):
    """The best row over every round, for runs with one row (sockperf)."""
    rows = [row for row in load(work, name) if row.get(key) is not None]
    if not rows:
        return None
    return (min if lowest else max)(rows, key=lambda row: row[key])


def best(work, name, key, lowest):
    """Per size ("bytes"), the best round's row."""
    by_size = {}
    for row in load(work, name):
        old = by_size.get(row["bytes"])
        if old is None or (row[key] < old[key] if lowest else row[key] > old[key]):
            by_size[row["bytes"]] = row
    return by_size


def size_label(size):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def figure(value):
    """Three significant digits or so, never more than three decimals."""
    if value >= 1000:
        return f"{value:.0f}"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 10:
        return f"{value:.2f}"
    return f"{value:.3f}"

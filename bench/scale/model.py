#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The table and the model of bench/scale/run.sh.

usage: model.py RESULTS.jsonl [--cores N]

RESULTS.jsonl holds one `rdmx perf scale --json` document per line (or
{"np": N, "failed": why}). Prints, per rank count: creation time, its cost per
rank, connections and store requests per rank, memory per rank, and the
all_reduce figures; then fits

    creation seconds = a * N^k        (least squares on log-log)
    memory per rank  = m0 + m1 * N    (least squares)

and extrapolates both to 16,384 ranks. On a host with fewer cores than
ranks, creation is CPU time shared out: the fit also runs on the time each
rank would take with a core of its own (measured x cores / N), which is the
figure a cluster sees, and says which one it extrapolates.

The targets (issue 47): at 256 ranks, memory per rank at most 64 MiB and
creation per rank within 2x of 16 ranks'; 16,384 ranks created in under 30 s,
counting the store's bytes at the rate of one loopback TCP stream.
Published points beside them: NCCL's initialisation at 32K-100K GPUs was
"several dozens of seconds" before NVIDIA/nccl pull request 1789 (2025); a
Gloo job of 8,000 ranks was reported to take 46 minutes to initialise.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from results import size_label  # noqa: E402  (bench/results.py)

MIB = 1024.0 * 1024.0
TARGET_MEMORY = 64 * MIB
TARGET_RANKS = 16384
TARGET_CREATE_S = 30.0
# What one store server can hand out: one loopback TCP stream, as iperf3
# measures it on the 2-vCPU machine (docs/PERFORMANCE.md, "Beside the peers").
STORE_BYTES_PER_S = 4.6e9


def fit_power(points):
    """(a, k) of y = a * x^k over points [(x, y)] with y > 0: a line on log-log; or None."""
    line = fit_line([(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0])
    return (math.exp(line[0]), line[1]) if line else None


def fit_line(points):
    """(b, m) of y = b + m * x, or None."""
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    m = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return my - m * mx, m


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    cores = None
    if "--cores" in argv:
        cores = int(argv[argv.index("--cores") + 1])
    docs = []
    with open(argv[0]) as f:
        for line in f:
            if line.strip():
                docs.append(json.loads(line))
    docs.sort(key=lambda d: d["np"])
    ok = [d for d in docs if "failed" not in d]

    hosts = max((d.get("hosts", 1) for d in ok), default=1)
    where = "local ranks on one host" if hosts <= 1 else "ranks on %d bed hosts (network namespaces of one machine)" % hosts
    print("\n# Communicators at scale: %s%s" % (where, ", %d cores" % cores if cores else ""))
    sizes = sorted({c["bytes"] for d in ok for c in d["all_reduce"]})
    head = "| ranks | hosts | create (s) | per rank (ms) | conns/rank | store req/rank | memory/rank (MiB) |"
    rule = "|---:|---:|---:|---:|---:|---:|---:|"
    for s in sizes:
        head += " all_reduce %s |" % size_label(s)
        rule += "---:|"
    print(head)
    print(rule)
    for d in docs:
        if "failed" in d:
            why = d["failed"] if len(d["failed"]) <= 160 else d["failed"][:157] + "..."
            print("| %d | | %s |" % (d["np"], why) + " |" * (5 + len(sizes)))
            continue
        n = d["np"]
        row = "| %d | %d | %.2f | %.1f | %g | %g | %.1f |" % (
            n, d["hosts"], d["create"]["seconds"], d["create"]["seconds"] * 1e3 / n,
            d["connections_per_rank"]["max"], d["store_requests"]["create_per_rank_max"],
            d["memory_per_rank"]["pss_after_collectives_max"] / MIB)
        calls = {c["bytes"]: c for c in d["all_reduce"]}
        for s in sizes:
            c = calls.get(s)
            if c is None:
                row += " |"
            elif s <= 65536:
                row += " %.1f us |" % c["time_us"]
            else:
                row += " %.3f GB/s |" % c["busbw_GBps"]
        print(row)
    if len(ok) < 2:
        print("\nFewer than two rank counts ran: no model.")
        return 0

    measured = [(d["np"], d["create"]["seconds"]) for d in ok]
    own_core = [(n, s * min(1.0, cores / n)) if cores else (n, s) for n, s in measured]
    power = fit_power(measured)
    power_core = fit_power(own_core)
    memory = fit_line([(d["np"], d["memory_per_rank"]["pss_after_collectives_max"]) for d in ok])
    print("\n## Model")
    if power:
        print("creation, as measured here: %.3g * N^%.2f s -> %.0f s at %d ranks" %
              (power[0], power[1], power[0] * TARGET_RANKS ** power[1], TARGET_RANKS))
    if power_core and cores:
        print("creation, a core per rank (measured x %d cores / N): %.3g * N^%.2f s -> %.3g s at %d ranks" %
              (cores, power_core[0], power_core[1], power_core[0] * TARGET_RANKS ** power_core[1], TARGET_RANKS))
    store_bytes = fit_power([(d["np"], d["store_requests"].get("create_bytes_read_total", 0)) for d in ok])
    if store_bytes:
        # One server answers every rank's reads: at scale its bytes, not a
        # rank's own work, bound creation.
        print("store bytes read while creating: %.3g * N^%.2f -> %.1f GB at %d ranks, through one store server" %
              (store_bytes[0], store_bytes[1], store_bytes[0] * TARGET_RANKS ** store_bytes[1] / 1e9, TARGET_RANKS))
    if memory:
        print("memory per rank: %.1f MiB + %.3f MiB x N -> %.0f MiB at 256 ranks, %.0f MiB at %d" %
              (memory[0] / MIB, memory[1] / MIB, (memory[0] + memory[1] * 256) / MIB,
               (memory[0] + memory[1] * TARGET_RANKS) / MIB, TARGET_RANKS))
    print("published: NCCL, 32K-100K GPUs: several dozens of seconds of initialisation (NVIDIA/nccl#1789, 2025); "
          "Gloo, 8,000 ranks: 46 minutes, as reported")

    print("\n## Targets")
    by_n = {d["np"]: d for d in ok}
    fit = power_core or power
    verdicts = []
    mem256 = by_n[256]["memory_per_rank"]["pss_after_collectives_max"] if 256 in by_n else (
        memory[0] + memory[1] * 256 if memory else None)
    if mem256 is not None:
        verdicts.append(("memory per rank at 256 ranks <= 64 MiB (%s)" % ("measured" if 256 in by_n else "model"),
                         mem256 <= TARGET_MEMORY, "%.0f MiB" % (mem256 / MIB)))
    if 16 in by_n:
        # Measured against measured, or the model against its own basis at 16.
        if 256 in by_n:
            base, at256, how = by_n[16]["create"]["seconds"], by_n[256]["create"]["seconds"], "measured"
        elif fit:
            base, at256 = fit[0] * 16 ** fit[1], fit[0] * 256 ** fit[1]
            how = "model" + (", a core per rank" if fit is power_core and cores else "")
        else:
            base = at256 = None
        if at256 is not None:
            verdicts.append(("creation per rank at 256 within 2x of 16's (%s)" % how,
                             at256 / 256 <= 2 * base / 16,
                             "%.1f ms vs %.1f ms" % (at256 / 256 * 1e3, base / 16 * 1e3)))
    if fit:
        # The ranks' own work runs in parallel; the store serves them one
        # after the other, so its bytes add their own time.
        ranks_s = fit[0] * TARGET_RANKS ** fit[1]
        store_s = store_bytes[0] * TARGET_RANKS ** store_bytes[1] / STORE_BYTES_PER_S if store_bytes else 0.0
        verdicts.append(("creation of %d ranks under %g s (model, with the store's bytes)" %
                         (TARGET_RANKS, TARGET_CREATE_S), ranks_s + store_s < TARGET_CREATE_S,
                         "%.3g s (ranks %.3g s + store %.3g s)" % (ranks_s + store_s, ranks_s, store_s)))
    for what, good, figure in verdicts:
        print("%-66s %-4s %s" % (what, "met" if good else "MISS", figure))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

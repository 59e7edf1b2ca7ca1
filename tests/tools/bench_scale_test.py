#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/scale: the model recovers the growth it is given and judges the
targets by it; the sweep runs rdmx perf scale at two rank counts and prints
the table and the model, on one host and on two hosts of the bed.

usage: bench_scale_test.py BUILD_DIR
"""

import io
import json
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "scale"))
import model  # noqa: E402

MIB = 1024 * 1024
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def doc(n, create_s, memory):
    return {"np": n, "hosts": 1, "create": {"seconds": create_s},
            "connections_per_rank": {"max": 2}, "store_requests": {"create_per_rank_max": 6},
            "memory_per_rank": {"pss_after_collectives_max": memory},
            "all_reduce": [{"bytes": 4, "time_us": 10.0, "busbw_GBps": 0.0}]}


def verdict(text, what):
    """The met/MISS word of the target line that begins with `what`."""
    for line in text.splitlines():
        if line.startswith(what):
            return line[len(what):].split()[0]
    return None


def run_model(docs, cores):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    out = io.StringIO()
    with redirect_stdout(out):
        model.main([f.name, "--cores", str(cores)])
    os.unlink(f.name)
    return out.getvalue()


def test_fits():
    a, k = model.fit_power([(n, 0.003 * n ** 2) for n in (8, 16, 32, 64)])
    check(abs(k - 2.0) < 1e-9 and abs(a - 0.003) < 1e-9, "power fit of 0.003 N^2 gave %g N^%g" % (a, k))
    b, m = model.fit_line([(n, 10 + 3 * n) for n in (8, 16, 32)])
    check(abs(b - 10) < 1e-9 and abs(m - 3) < 1e-9, "line fit of 10 + 3N gave %g + %g N" % (b, m))


def test_verdicts():
    # A full mesh: time and memory grow with N on every rank.
    mesh = run_model([doc(n, 0.001 * n * n, 8 * MIB * n) for n in (8, 16, 32)], cores=64)
    check("memory per rank at 256 ranks <= 64 MiB (model)" in mesh and "MISS 2048 MiB" in mesh,
          "a full mesh's memory is not judged a miss:\n" + mesh)
    check("creation of 16384 ranks under 30 s (model, with the store's bytes)" in mesh, "no 16384-rank verdict:\n" + mesh)
    # What connecting only ring neighbours would give: flat memory, log creation.
    lazy = run_model([doc(n, 0.05 + 0.001 * n, 20 * MIB) for n in (16, 64, 256)], cores=512)
    check("memory per rank at 256 ranks <= 64 MiB (measured)" in lazy and "met  20 MiB" in lazy,
          "flat memory is not judged met:\n" + lazy)
    check(verdict(lazy, "creation per rank at 256 within 2x of 16's (measured)") == "met",
          "near-linear creation is not judged met:\n" + lazy)
    check(verdict(mesh, "creation of 16384 ranks under 30 s (model, with the store's bytes)") == "MISS",
          "a quadratic creation is not judged a miss:\n" + mesh)
    # Oversubscribed: 2 cores, time shared out; the model says which basis it used.
    over = run_model([doc(n, 0.001 * n * n, 8 * MIB * n) for n in (8, 16, 32)], cores=2)
    check("a core per rank (measured x 2 cores / N)" in over, "no per-core basis on 2 cores:\n" + over)
    # Fast ranks, but a store that hands every rank every other rank's
    # address: N^2 bytes through one server miss the target on their own.
    stored = [dict(doc(n, 0.001 * n, 20 * MIB), store_requests={"create_per_rank_max": 6,
                                                                 "create_bytes_read_total": 600 * n * n})
              for n in (16, 64, 256)]
    flooded = run_model(stored, cores=512)
    check(verdict(flooded, "creation of 16384 ranks under 30 s (model, with the store's bytes)") == "MISS",
          "a store serving N^2 bytes is not judged a miss:\n" + flooded)
    failed = run_model([doc(8, 0.1, MIB), {"np": 64, "failed": "exit 1: does not fit"}], cores=2)
    check("| 64 | | exit 1: does not fit |" in failed, "a failed rank count is not in the table:\n" + failed)


def test_sweep(build):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "scale.jsonl")
        r = subprocess.run(["bash", os.path.join(ROOT, "bench", "scale", "run.sh"), build, "--np", "2 3",
                            "--sizes", "4,64K", "--out", out], capture_output=True, text=True, timeout=240)
        check(r.returncode == 0, "the sweep failed (exit %d):\n%s\n%s" % (r.returncode, r.stdout, r.stderr))
        rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
        check([d.get("np") for d in rows] == [2, 3], "the sweep kept %s" % rows)
        for d in rows:
            check(d.get("connections_per_rank", {}).get("max") == d["np"] - 1,
                  "%d ranks: connections %s" % (d["np"], d.get("connections_per_rank")))
        check("| 3 | 1 |" in r.stdout and "## Model" in r.stdout and "## Targets" in r.stdout,
              "the table or the model is missing:\n" + r.stdout)


def test_bed_sweep(build):
    """--bed: the ranks split among bed hosts, and the table says so."""
    if os.geteuid() != 0:
        print("skipped the bed sweep: network namespaces need root")
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "scale.jsonl")
        r = subprocess.run(["bash", os.path.join(ROOT, "bench", "scale", "run.sh"), build, "--np", "4 3",
                            "--sizes", "4", "--bed", "2", "--out", out], capture_output=True, text=True, timeout=240)
        rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
        check([(d.get("np"), d.get("hosts"), "failed" in d) for d in rows] == [(4, 2, False), (3, None, True)],
              "the bed sweep kept %s\n%s\n%s" % (rows, r.stdout, r.stderr))
        check(r.returncode != 0, "3 ranks on 2 hosts should fail the sweep")
        check(any("do not divide" in d.get("failed", "") for d in rows), "3 ranks on 2 hosts: %s" % rows)
        check("ranks on 2 bed hosts" in r.stdout and "| 4 | 2 |" in r.stdout,
              "the bed's table is missing:\n" + r.stdout)


if __name__ == "__main__":
    test_fits()
    test_verdicts()
    if len(sys.argv) > 1:
        test_sweep(sys.argv[1])
        test_bed_sweep(sys.argv[1])
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/device_check_report.py: the summary of scripts/device_check.sh.

    device_check_report.py ctest-counts CTEST_LOG      one line of counts
    device_check_report.py pytest-counts JUNIT_XML [LOG]   one line of counts
    device_check_report.py summary WORK MODE ELAPSED BUDGET
        summary.txt on stdout, from WORK's env.txt, stages.tsv, groups.tsv,
        ctest.log, pytest.xml and bench/*; exit status 1 when a stage failed.

Standard library only: it runs under the device's own python3.
"""

import json
import os
import re
import sys
import xml.etree.ElementTree as ET

# "  12/402 Test  #5: Name  # GetParam() = x ....   Passed    0.52 sec" and
# "...***Failed", "***Skipped", "***Timeout", "***Exception: SegFault", "***Not Run".
CTEST_LINE = re.compile(r"^\s*\d+/\d+\s+Test\s+#\d+:\s+(.+?)\s+\.*\s*(?:\*\*\*)?"
                        r"(Passed|Failed|Skipped|Timeout|Exception[^0-9]*?|Not Run[^0-9]*?)\s+[\d.]+\s+sec")
MiB = 1 << 20


def ctest_results(path):
    """[(name, outcome)] with outcome passed, failed (with the reason) or skipped."""
    results = []
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return results
    for line in lines:
        m = CTEST_LINE.match(line)
        if not m:
            continue
        name = m.group(1).split("  #")[0].strip()
        status = m.group(2).strip()
        outcome = {"Passed": "passed", "Skipped": "skipped"}.get(status, "failed (%s)" % status)
        results.append((name, outcome))
    return results


def counts_line(outcomes):
    passed = sum(1 for o in outcomes if o == "passed")
    skipped = sum(1 for o in outcomes if o == "skipped")
    failed = len(outcomes) - passed - skipped
    return "%d run: %d passed, %d failed, %d skipped" % (len(outcomes), passed, failed, skipped)


PYTEST_LINE = re.compile(r"::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")


def pytest_results(path, log=None):
    """[(name, outcome)] from pytest's JUnit XML, else (a run stopped at its
    time limit writes none) from the lines of its -v output."""
    results = []
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        try:
            lines = open(log, errors="replace").read().splitlines() if log else []
        except OSError:
            lines = []
        for line in lines:
            m = PYTEST_LINE.search(line)
            if m:
                outcome = {"PASSED": "passed", "SKIPPED": "skipped", "XFAIL": "skipped"}.get(m.group(2), "failed")
                results.append((m.group(1), outcome))
        return results
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            skip = case.find("skipped")
            outcome = "skipped"
            name += " (%s)" % (skip.get("message") or "").strip()[:120]
        else:
            outcome = "passed"
        results.append((name, outcome))
    return results


def size_text(n):
    for unit, factor in (("G", 1 << 30), ("M", MiB), ("K", 1024)):
        if n >= factor and n % factor == 0:
            return "%d%s" % (n // factor, unit)
    return str(n)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def peak_gbps(doc):
    """The largest number under a key naming GB/s anywhere in a JSON document."""
    best = None
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(value, (int, float)) and re.search(r"gb_?p?s|gbps", key, re.I):
                best = value if best is None else max(best, value)
            else:
                inner = peak_gbps(value)
                if inner is not None:
                    best = inner if best is None else max(best, inner)
    elif isinstance(doc, list):
        for value in doc:
            inner = peak_gbps(value)
            if inner is not None:
                best = inner if best is None else max(best, inner)
    return best


def p2p_lines(doc):
    lines = []
    for run in doc.get("runs", []):
        if run.get("latency"):
            cells = ["%s %.2f us" % (size_text(r["bytes"]), r.get("t_typical_us", r.get("t_avg_us", 0)))
                     for r in run.get("results", [])]
        else:
            cells = ["%s %.1f GB/s" % (size_text(r["bytes"]), r.get("bw_avg_gb_s", 0)) for r in run.get("results", [])]
        lines.append("    %s over %s: %s" % (run.get("test"), doc.get("transport", "?"), ", ".join(cells)))
    return lines


def coll_busbw(doc):
    """{bytes: best busbw GB/s} over in-place and out-of-place."""
    best = {}
    for run in doc.get("runs", []):
        for r in run.get("results", []):
            best[r["bytes"]] = max(best.get(r["bytes"], 0.0), r.get("busbw_GBps", 0.0))
    return best


def coll_floor_us(doc):
    """(bytes, best time in us) at the smallest size, or None."""
    rows = [r for run in doc.get("runs", []) for r in run.get("results", []) if "time_us" in r]
    if not rows:
        return None
    small = min(r["bytes"] for r in rows)
    return small, min(r["time_us"] for r in rows if r["bytes"] == small)


def bench_order(name):
    """p2p over shm, then the collectives by rank count, then tcp."""
    m = re.search(r"np(\d+)", name)
    group = 0 if name.startswith("p2p-shm") else 1 if name.startswith("coll-") else 2
    return (group, int(m.group(1)) if m else 0, name)


def bench_section(work):
    lines = []
    bench = os.path.join(work, "bench")
    names = sorted(os.listdir(bench)) if os.path.isdir(bench) else []
    roofline = None
    copy = os.path.join(bench, "gpu-copy.json")
    if os.path.exists(copy):
        doc = load_json(copy)
        if doc is not None:
            roofline = peak_gbps(doc)
            lines.append("  gpu-copy (device-to-device roofline): peak %s GB/s" %
                         ("%.1f" % roofline if roofline is not None else "?"))
        else:
            text = open(copy, errors="replace").read().strip().splitlines()
            lines.append("  gpu-copy (device-to-device roofline), its output:")
            lines += ["    " + t for t in text[-8:]]
    tcp = {}
    for name in sorted(names, key=bench_order):
        path = os.path.join(bench, name)
        if name.startswith("p2p-tcp-"):
            doc = load_json(path)
            for run in (doc or {}).get("runs", []):
                for r in run.get("results", []):
                    tcp.setdefault(r["bytes"], {})[name[len("p2p-tcp-"):-5]] = r.get("bw_avg_gb_s", 0.0)
        if name.startswith("p2p-"):
            doc = load_json(path)
            if doc:
                lines.append("  %s:" % name[:-5])
                lines += p2p_lines(doc)
        elif name.startswith("coll-"):
            doc = load_json(path)
            if not doc:
                continue
            best = coll_busbw(doc)
            big = [(b, bw) for b, bw in sorted(best.items()) if b >= 256 * MiB]
            cells = ", ".join("%s %.1f" % (size_text(b), bw) for b, bw in sorted(best.items()))
            lines.append("  %s (busbw GB/s): %s" % (name[:-5], cells))
            floor = coll_floor_us(doc)
            if floor:
                lines.append("    at %s: %.2f us per call" % (size_text(floor[0]), floor[1]))
            for b, bw in big:
                ratio = " = %.2fx the roofline (target 0.8x)" % (bw / roofline) if roofline else ""
                lines.append("    at %s: %.1f GB/s%s" % (size_text(b), bw, ratio))
    cells = ["%s %.2fx" % (size_text(b), v["device"] / v["host"]) for b, v in sorted(tcp.items())
             if v.get("device") and v.get("host")]
    if cells:
        lines.append("  tcp write_bw, device buffers / host buffers (the staging cost): " + ", ".join(cells))
    torch_rows = {}
    for backend in ("rdmx", "gloo"):
        try:
            for line in open(os.path.join(bench, "torch-%s.jsonl" % backend)):
                row = json.loads(line)
                key = row["bytes"]
                torch_rows.setdefault(key, {})[backend] = min(torch_rows.get(key, {}).get(backend, 1e30),
                                                              row["time_us"])
        except (OSError, ValueError, KeyError):
            pass
    if torch_rows:
        lines.append("  torch all_reduce on CUDA tensors, 2 ranks (us per call; target gloo/rdmx >= 10 from 1M):")
        for b in sorted(torch_rows):
            r, g = torch_rows[b].get("rdmx"), torch_rows[b].get("gloo")
            ratio = " gloo/rdmx %.1fx" % (g / r) if r and g else ""
            lines.append("    %s: rdmx %s, gloo %s%s" % (size_text(b), "%.1f" % r if r else "-",
                                                        "%.1f" % g if g else "-", ratio))
    return lines


def summary(work, mode, elapsed, budget):
    out = []
    title = "on the GPU" if mode == "run" else "dry run on the simulated CUDA driver (sampled tests, small sizes)"
    out.append("rdmx device check, %s: %s s of %s" % (title, elapsed, budget))
    try:
        out += ["  " + line for line in open(os.path.join(work, "env.txt")).read().splitlines()]
    except OSError:
        pass
    out.append("")
    out.append("STAGES")
    failed_stages = []
    try:
        stages = [line.rstrip("\n").split("\t") for line in open(os.path.join(work, "stages.tsv"))]
    except OSError:
        stages = []
    for name, status, seconds, note in (s + [""] * (4 - len(s)) for s in stages):
        out.append("  %-24s %-4s %4s s  %s" % (name, status, seconds, note))
        if status == "FAIL":
            failed_stages.append(name)

    results = ctest_results(os.path.join(work, "ctest.log"))
    out.append("")
    out.append("GPU TESTS (plain cases%s)" % (", the real driver" if mode == "run" else ", the simulated driver"))
    groups = []
    try:
        groups = [line.rstrip("\n").split("\t") for line in open(os.path.join(work, "groups.tsv"))]
    except OSError:
        pass
    for gname, regex in groups:
        mine = [o for n, o in results if re.search(regex, n)]
        out.append("  %-38s %s" % (gname, counts_line(mine) if mine else "none run"))
    bad = [(n, o) for n, o in results if o.startswith("failed")]
    skipped = [n for n, o in results if o == "skipped"]
    for n, o in bad:
        out.append("  FAILED %s: %s" % (o[len("failed "):], n))
    if skipped:
        out.append("  skipped (%d)%s: %s" % (len(skipped), " on a GPU, which they should not be" if mode == "run" else "",
                                            ", ".join(skipped[:25]) + (" ..." if len(skipped) > 25 else "")))

    torch = pytest_results(os.path.join(work, "pytest.xml"), os.path.join(work, "logs", "torch.log"))
    if torch:
        out.append("")
        out.append("TORCH BACKEND ON CUDA TENSORS: %s" % counts_line([o for _, o in torch]))
        for n, o in torch:
            if o != "passed":
                out.append("  %s %s" % (o.upper(), n))

    lines = bench_section(work)
    out.append("")
    out.append("BENCHMARKS" + ("" if lines else ": no figures (see the bench stages above)"))
    out += lines
    todo = [s for s in stages if len(s) > 3 and s[3].startswith("TODO")]
    for s in todo:
        out.append("  %s" % s[3])
    out.append("")
    out.append("RESULT: %s" % ("FAILED stages: " + ", ".join(failed_stages) if failed_stages else "every stage passed"))
    print("\n".join(out))
    return 1 if failed_stages else 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "ctest-counts":
        print(counts_line([o for _, o in ctest_results(argv[1])]))
        return 0
    if len(argv) >= 2 and argv[0] == "pytest-counts":
        results = pytest_results(argv[1], argv[2] if len(argv) > 2 else None)
        print(counts_line([o for _, o in results]) if results else "no results (see torch.log)")
        return 0
    if len(argv) == 5 and argv[0] == "summary":
        return summary(*argv[1:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/plan/real_clusters.py: replay the validation on real clusters.

    bench/plan/real_clusters.py RDMX [--write] [--markdown]

Runs every row of tools/rdmx/plan/data/validation.json through its own
command with the rdmx binary RDMX, and prints published against modelled
with the error and whether the row keeps its bound (docs/ADVISOR.md,
"Validation on real clusters"). --write records today's modelled values
in the file (after a deliberate change to the model; say why in the
commit); --markdown prints the table docs/ADVISOR.md shows.
tests/tools/plan_real_clusters_test.cpp is the same replay in make test.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "rdmx", "plan", "data")


def replay(rdmx, row):
    args = [a.replace("{data}", os.path.normpath(DATA)) for a in row["args"]]
    if row["kind"] == "collective":
        out = subprocess.run([rdmx] + args, capture_output=True, text=True, check=True).stdout
        return json.loads(out.splitlines()[-1])["busbw_gb_s"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "plan.json")
        subprocess.run([rdmx] + args + ["--json", path], capture_output=True, text=True, check=True)
        with open(path) as f:
            plan = json.load(f)
    eff = {r["nodes"]: r["efficiency"] for r in plan["rows"]}
    value = eff[row["nodes"]]
    if row.get("relative_to_nodes"):
        value /= eff[row["relative_to_nodes"]]
    return value


def error(row, modelled):
    if row["kind"] == "collective":
        return modelled / row["published"] - 1
    return (modelled - row["published"]) * 100


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rdmx", help="the rdmx binary (build/tools/rdmx)")
    ap.add_argument("--write", action="store_true", help="record today's modelled values in validation.json")
    ap.add_argument("--markdown", action="store_true", help="print the table as docs/ADVISOR.md shows it")
    opts = ap.parse_args()
    path = os.path.join(DATA, "validation.json")
    with open(path) as f:
        doc = json.load(f)
    bounds = doc["bounds"]
    if opts.markdown:
        print("| case | transport | published | modelled | error | bound | role |")
        print("|---|---|---|---|---|---|---|")
    failed = 0
    for row in doc["rows"]:
        modelled = replay(opts.rdmx, row)
        err = error(row, modelled)
        common = bounds["collective_relative"] if row["kind"] == "collective" else bounds["scaling_points"]
        within = abs(err) <= common + 1e-9
        explained = row.get("explained")
        ok = (not explained and within) or (explained and not within and abs(err) <= explained["bound"])
        failed += 0 if ok else 1
        if row["kind"] == "collective":
            pub, mod, err_text = f"{row['published']:.3g} GB/s", f"{modelled:.3g} GB/s", f"{err * 100:+.0f}%"
            bound = f"{(explained['bound'] if explained else common) * 100:.0f}%"
        else:
            pub, mod, err_text = f"{row['published'] * 100:.1f}%", f"{modelled * 100:.1f}%", f"{err:+.1f} pt"
            bound = f"{explained['bound'] if explained else common:g} pt"
        if opts.markdown:
            shown = err_text if within else f"**{err_text}**"
            kept = bound + (" (explained)" if explained else "")
            print(f"| {row['label']} | {row['transport']} | {pub} | {mod} | {shown} | {kept} | {row['role']} |")
        else:
            print(f"{row['id']:28} {row['transport']:6} published {pub:>11} modelled {mod:>11} {err_text:>9} "
                  f"{'ok' if ok else 'OUT OF BOUND'}{' (explained)' if explained else ''}")
        if opts.write:
            row["modelled"] = round(modelled, 4 if row["kind"] == "scaling" else 3)
    if opts.write:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=True)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/plan/validation_data.py: keep a bed validation run as test data.

    bench/plan/validation_data.py COLLECTIVES_DIR DDP_DIR OUT_DIR [--explained FILE] [--capture-rate R]

Reads what bench/plan/validate_collectives.sh and validate_ddp.sh left in
their output folders (the calibrated fabric-RATE.json, rdmx perf coll's
measured-RATE-LAYOUT.json, ddp_step.py's ddp-RATE-LAYOUT.jsonl and the
captured profile-LAYOUT.jsonl) and writes OUT_DIR/validation.json with the
measurements, beside copies of the fabric profiles and the DDP profiles.
tests/tools/plan_validation_test.cpp replays them through the model, so a
change to the model that moves a prediction out of 15% of its measurement
fails CI. --explained names a JSON list of rows allowed further out, each
with its bound and why (docs/ADVISOR.md, "Validation").
"""
import argparse
import glob
import json
import os
import re
import shutil
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("collectives_dir")
    ap.add_argument("ddp_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--explained", default=None)
    ap.add_argument("--capture-rate", default="1gbit", help="the rate validate_ddp.sh captured the profiles at")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    fabrics = {}
    for path in sorted(glob.glob(os.path.join(args.collectives_dir, "fabric-*.json"))):
        rate = re.match(r"fabric-(.+)\.json$", os.path.basename(path)).group(1)
        fabrics[rate] = os.path.basename(path)
        shutil.copy(path, os.path.join(args.out_dir, os.path.basename(path)))

    collectives = []
    for path in sorted(glob.glob(os.path.join(args.collectives_dir, "measured-*.json"))):
        rate, layout = re.match(r"measured-(.+)-(\d+x\d+)\.json$", os.path.basename(path)).groups()
        try:
            doc = json.load(open(path))
        except ValueError:
            print(f"{path}: no measurement, skipped", file=sys.stderr)
            continue
        for run in doc["runs"]:
            for r in run["results"]:
                if not r["inplace"]:
                    collectives.append({"rate": rate, "layout": layout, "bytes": int(r["bytes"]),
                                        "measured_us": round(r["time_us"], 1)})

    ddp = []
    for path in sorted(glob.glob(os.path.join(args.ddp_dir, "ddp-*.jsonl"))):
        rate, layout = re.match(r"ddp-(.+)-(\d+x\d+)\.jsonl$", os.path.basename(path)).groups()
        lines = open(path).read().splitlines()
        if not lines:
            print(f"{path}: no measurement, skipped", file=sys.stderr)
            continue
        m = json.loads(lines[-1])
        ddp.append({"rate": rate, "layout": layout, "model": m["model"], "batch": m["batch"],
                    "measured_step_ms": m["step_ms"], "measured_compute_ms": m["compute_ms"]})
    profiles = {}
    for path in sorted(glob.glob(os.path.join(args.ddp_dir, "profile-*.jsonl"))):
        layout = re.match(r"profile-(\d+x\d+)\.jsonl$", os.path.basename(path)).group(1)
        profiles[layout] = os.path.basename(path)
        shutil.copy(path, os.path.join(args.out_dir, os.path.basename(path)))
    for path in glob.glob(os.path.join(args.ddp_dir, "fabric-*.json")):
        rate = re.match(r"fabric-(.+)\.json$", os.path.basename(path)).group(1)
        if rate not in fabrics:  # the DDP run calibrated a rate the collectives did not
            fabrics[rate] = os.path.basename(path)
            shutil.copy(path, os.path.join(args.out_dir, os.path.basename(path)))

    doc = {
        "about": "A validation run of rdmx plan on the multi-host bed (docs/ADVISOR.md, 'Validation'), written by "
                 "bench/plan/validation_data.py; tests/tools/plan_validation_test.cpp replays it.",
        "fabrics": fabrics,
        "profiles": profiles,
        "capture_rate": args.capture_rate,
        "collectives": collectives,
        "ddp": ddp,
        "explained": json.load(open(args.explained)) if args.explained else [],
    }
    with open(os.path.join(args.out_dir, "validation.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out_dir}/validation.json: {len(collectives)} all_reduce rows, {len(ddp)} DDP rows, "
          f"{len(fabrics)} fabrics, {len(profiles)} profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())

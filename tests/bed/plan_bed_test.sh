#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# rdmx plan against the bed, live and bounded (docs/ADVISOR.md,
# "Validation"): two hosts of two ranks over links shaped to 500 Mbit/s.
# rdmx plan calibrate measures the bed and writes a fabric profile; the
# model's all_reduce times from that profile must come within 15% of what
# rdmx perf coll then measures, on one rank per host (ring) and two (hier),
# at sizes where the link, not the two cores, sets the pace.
#   tests/bed/plan_bed_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/bed_prelude.sh" "$1"
name="p$(($$ % 100000))"
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-plan-bed.XXXXXX")
trap '"$bed" down "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export RDMX_TIMEOUT=${RDMX_TIMEOUT:-120}
port=$((20000 + $$ % 10000))

fail() { fail_with_logs "plan bed test" "$*"; }

"$bed" up "$name" 2 500mbit
"$bed" run "$name" 2x2 --time-limit 240 --port "$port" -- "$rdmx" plan calibrate --name bed --nic-gbit 0.5 \
  --seconds 0.3 --out "$work/bed.json" >"$work/calibrate.log" 2>&1 || fail "calibrate failed (exit $?)"
grep -q '"nic_gbit": 0.5' "$work/bed.json" || fail "the profile does not carry --nic-gbit: $(cat "$work/bed.json")"

sizes=4M,16M
for layout in 2x1 2x2; do
  H=${layout%x*} L=${layout#*x}
  # The bed runs rdmx's collectives, so rdmx's model predicts them (plan's default is NCCL's).
  "$rdmx" plan collective --library rdmx --fabric-file "$work/bed.json" --nodes "$H" --gpus-per-node "$L" --sizes "$sizes" \
    --json >"$work/predicted-$layout.jsonl" || fail "plan collective failed for $layout"
  "$bed" run "$name" "$layout" --time-limit 240 --port "$((port + H * 10 + L))" -- "$rdmx" perf coll all_reduce \
    --sizes "$sizes" -n 3 -w 1 -c 0 --json >"$work/measured-$layout.log" 2>&1 || fail "perf coll $layout failed"
  sed -n 's/^\[0\] //p' "$work/measured-$layout.log" >"$work/measured-$layout.json"
  python3 - "$layout" "$work/predicted-$layout.jsonl" "$work/measured-$layout.json" <<'PY' || fail "$layout: off"
import json, sys
layout, predicted, measured = sys.argv[1:4]
pred = {int(r["bytes"]): r for r in map(json.loads, open(predicted))}
rows = [r for run in json.load(open(measured))["runs"] for r in run["results"] if not r["inplace"]]
assert len(rows) == len(pred), f"{len(rows)} measured rows for {len(pred)} sizes"
bad = 0
for r in rows:
    p = pred[int(r["bytes"])]
    ratio = r["time_us"] / p["time_us"]
    print(f'{layout} {r["bytes"]:>9} B {p["algo"]:>5}: predicted {p["time_us"]:.0f} us, '
          f'measured {r["time_us"]:.0f} us, measured/predicted {ratio:.3f}')
    bad += abs(ratio - 1) > 0.15
sys.exit(1 if bad else 0)
PY
done
echo "plan bed test: every prediction within 15%"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# rdmx plan against measurement on the multi-host bed (docs/ADVISOR.md,
# "Validation"). For each link rate: build a bed of 8 hosts shaped to that
# rate, calibrate on 2 hosts of 2 ranks (rdmx plan calibrate), predict every
# layout's all_reduce from that profile (rdmx plan collective), measure it
# (rdmx perf coll), and print one row per (rate, layout, size):
#
#   rate layout bytes algo predicted_us measured_us measured/predicted
#
# Needs root (namespaces). Usage:
#   bench/plan/validate_collectives.sh BUILD [OUT_DIR]
# with PLAN_RATES (default "250mbit 500mbit 1gbit"), PLAN_LAYOUTS (default
# "2x1 4x1 8x1 2x2 4x2"), PLAN_SIZES (default 1M,4M,16M,64M,256M) and
# PLAN_ITERS (timed calls per size, default 3).
set -euo pipefail
build=${1:?usage: validate_collectives.sh BUILD [OUT_DIR]}
out=${2:-$build/plan-validation}
here=$(cd "$(dirname "$0")/../.." && pwd)
bed=$here/scripts/bed.sh
# shellcheck source=bench/plan/bed_common.sh
source "$here/bench/plan/bed_common.sh"
rdmx=$(cd "$build" && pwd)/tools/rdmx
rates=${PLAN_RATES:-250mbit 500mbit 1gbit}
layouts=${PLAN_LAYOUTS:-2x1 4x1 8x1 2x2 4x2}
sizes=${PLAN_SIZES:-1M,4M,16M,64M,256M}
iters=${PLAN_ITERS:-3}
name=pv
mkdir -p "$out"
out=$(cd "$out" && pwd)

max_hosts=$(hosts_for $layouts)

trap '"$bed" down "$name" >/dev/null 2>&1 || true' EXIT
echo "rate layout bytes algo predicted_us measured_us measured/predicted"
for rate in $rates; do
  "$bed" down "$name" >/dev/null 2>&1 || true
  show "bed.sh up $name $max_hosts $rate"
  "$bed" up "$name" "$max_hosts" "$rate" >&2
  profile=$out/fabric-$rate.json
  calibrate "$name" "$rate" "$profile"
  for layout in $layouts; do
    H=${layout%x*} L=${layout#*x}
    predicted=$out/predicted-$rate-$layout.jsonl
    "$rdmx" plan collective --library rdmx --fabric-file "$profile" --nodes "$H" --gpus-per-node "$L" --sizes "$sizes" \
      --json > "$predicted"
    measured=$out/measured-$rate-$layout.json
    show "bed.sh run $name $layout -- rdmx perf coll all_reduce --sizes $sizes -n $iters -w 1 -c 0 --json"
    "$bed" run "$name" "$layout" --time-limit 900 -- "$rdmx" perf coll all_reduce --sizes "$sizes" -n "$iters" -w 1 \
      -c 0 --json 2>/dev/null | sed -n 's/^\[0\] //p' > "$measured" || echo "$rate $layout failed" >&2
    python3 - "$rate" "$layout" "$predicted" "$measured" <<'PY'
import json, sys
rate, layout, predicted, measured = sys.argv[1:5]
pred = {}
for line in open(predicted):
    row = json.loads(line)
    pred[int(row["bytes"])] = row
try:
    doc = json.load(open(measured))
except Exception as e:
    print(f"{rate} {layout} - - - - no measurement ({e})")
    sys.exit(0)
for run in doc["runs"]:
    for r in run["results"]:
        if r["inplace"]:
            continue
        p = pred.get(int(r["bytes"]))
        if p is None:
            continue
        print(f'{rate} {layout} {r["bytes"]} {p["algo"]} {p["time_us"]:.0f} {r["time_us"]:.0f} '
              f'{r["time_us"] / p["time_us"]:.3f}')
PY
  done
done

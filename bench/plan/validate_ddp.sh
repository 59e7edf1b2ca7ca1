#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# rdmx plan against real DDP training steps on the multi-host bed
# (docs/ADVISOR.md, "Validation"). For each link rate: build a bed shaped to
# it, calibrate on 2 hosts of 2 ranks (or take FABRIC_DIR's fabric-RATE.json
# from validate_collectives.sh), and time DDP steps of bench/torch/ddp_step.py
# through the rdmx torch backend in every layout. At the capture rate the
# same runs also record RDMX_PROFILE; rdmx plan replays each layout's
# profile with each rate's calibrated fabric, and one row per (rate, layout)
# compares it with the step measured there:
#
#   rate layout compute_ms predicted_ms measured_ms measured/predicted scaled_ms measured/scaled
#
# (scaled: the profile's compute scaled by that run's compute-only steps against
# the capture run's, since the advisor takes compute as given)
#
# Needs root (namespaces) and the pinned torch of scripts/deps.sh (bench/common.sh's bench_python). Usage:
#   bench/plan/validate_ddp.sh BUILD [OUT_DIR]
# with PLAN_RATES (default "250mbit 500mbit 1gbit"), PLAN_CAPTURE_RATE
# (default the last rate), PLAN_LAYOUTS (default "2x1 4x1 2x2"), DDP_MODEL
# (small-mlp), DDP_BATCH (256), DDP_STEPS (timed steps of each kind, 3) and
# FABRIC_DIR.
set -euo pipefail
build=${1:?usage: validate_ddp.sh BUILD [OUT_DIR]}
out=${2:-$build/plan-ddp-validation}
here=$(cd "$(dirname "$0")/../.." && pwd)
bed=$here/scripts/bed.sh
# shellcheck source=bench/plan/bed_common.sh
source "$here/bench/plan/bed_common.sh"
# shellcheck source=bench/common.sh
source "$here/bench/common.sh"
build=$(cd "$build" && pwd)
rdmx=$build/tools/rdmx
rates=${PLAN_RATES:-250mbit 500mbit 1gbit}
capture=${PLAN_CAPTURE_RATE:-${rates##* }}
layouts=${PLAN_LAYOUTS:-2x1 4x1 2x2}
model=${DDP_MODEL:-small-mlp}
batch=${DDP_BATCH:-256}
steps=${DDP_STEPS:-3}
fabric_dir=${FABRIC_DIR:-}
name=pd
mkdir -p "$out"
out=$(cd "$out" && pwd)
[[ " $rates " == *" $capture "* ]] || { echo "validate_ddp.sh: capture rate $capture is not in '$rates'" >&2; exit 2; }

max_hosts=$(hosts_for $layouts)

# The capture rate first: its profiles serve every rate.
ordered="$capture"
for rate in $rates; do [[ $rate == "$capture" ]] || ordered="$ordered $rate"; done

trap '"$bed" down "$name" >/dev/null 2>&1 || true' EXIT
for rate in $ordered; do
  "$bed" down "$name" >/dev/null 2>&1 || true
  show "bed.sh up $name $max_hosts $rate"
  "$bed" up "$name" "$max_hosts" "$rate" >&2
  profile=$out/fabric-$rate.json
  if [[ -n $fabric_dir && -f $fabric_dir/fabric-$rate.json ]]; then
    cp "$fabric_dir/fabric-$rate.json" "$profile"
  else
    calibrate "$name" "$rate" "$profile"
  fi
  for layout in $layouts; do
    measured=$out/ddp-$rate-$layout.jsonl
    rm -f "$measured"
    extra=()
    env=(PYTHONPATH="$build/python")
    if [[ $rate == "$capture" ]]; then
      rm -f "$out/profile-$layout.jsonl"
      extra=(--profile-steps 5)
      env+=(RDMX_PROFILE="$out/profile-$layout.jsonl")
    fi
    show "bed.sh run $name $layout -- ddp_step.py --backend rdmx --model $model --batch $batch --steps $steps ${extra[*]}"
    "$bed" run "$name" "$layout" --time-limit 900 -- env "${env[@]}" "$(bench_python)" \
      "$here/bench/torch/ddp_step.py" --backend rdmx --model "$model" --batch "$batch" --steps "$steps" \
      --warmup 2 --json "$measured" "${extra[@]}" >&2 || echo "$rate $layout: ddp_step.py failed" >&2
  done
done

python3 - "$rdmx" "$out" "$capture" "$rates" "$layouts" <<'PY'
import json, subprocess, sys
rdmx, out, capture, rates, layouts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split()

def measured(rate, layout):
    try:
        return json.loads(open(f"{out}/ddp-{rate}-{layout}.jsonl").read().splitlines()[-1])
    except (OSError, IndexError, ValueError):
        return None

def plan(rate, layout, compute_ms=None):
    h, g = layout.split("x")
    args = [rdmx, "plan", "--library", "rdmx", "--model", f"{out}/profile-{layout}.jsonl", "--fabric-file", f"{out}/fabric-{rate}.json",
            "--fabrics", f"bed-{rate}", "--nodes", h, "--gpus-per-node", g, "--json", f"{out}/predicted-{rate}-{layout}.json"]
    if compute_ms is not None:
        args += ["--compute-ms", f"{compute_ms:.3f}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return json.load(open(f"{out}/predicted-{rate}-{layout}.json"))["rows"][0]

# predicted: the captured profile as it ran; scaled: its compute scaled by
# this run's compute-only steps against the capture run's (the advisor takes
# compute as given; on two cores it moves between runs).
print("rate layout compute_ms predicted_ms measured_ms measured/predicted scaled_ms measured/scaled")
for rate in rates:
    for layout in layouts:
        m, c = measured(rate, layout), measured(capture, layout)
        if m is None or c is None:
            print(f"{rate} {layout} - - - no measurement")
            continue
        try:
            base = plan(rate, layout)
            scaled = plan(rate, layout, base["compute_ms"] * m["compute_ms"] / c["compute_ms"])
        except subprocess.CalledProcessError as e:
            print(f"{rate} {layout} - - - no prediction ({e})")
            continue
        print(f'{rate} {layout} {m["compute_ms"]:.0f} {base["step_ms"]:.0f} {m["step_ms"]:.0f} '
              f'{m["step_ms"] / base["step_ms"]:.3f} {scaled["step_ms"]:.0f} {m["step_ms"] / scaled["step_ms"]:.3f}')
PY

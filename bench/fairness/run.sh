#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/fairness/run.sh BUILD_DIR [--spin "0 50 200 2000"] (`make bench-fairness`):
# what waiting ranks cost the work beside them, and what that work costs them.
#
# Two local ranks run a collective sweep (bench/run_coll.sh: rdmx shm and
# Open MPI vader) twice: on an idle host, and while one other process takes
# a core in bursts (RDMX_FAIR_BURST seconds busy in every RDMX_FAIR_PERIOD,
# default 0.4 of 1.0), a stand-in for a data loader or a checkpoint writer.
# rdmx runs once per RDMX_SPIN_US value of --spin (how long a waiter
# busy-polls before it sleeps; unset: the library's default). The burner
# counts the busy loops it completed, so the table shows both sides: how much
# slower each collective became, and how much work the burner lost to the
# ranks' waiting (against a burner run alone).
#
# Knobs: RDMX_FAIR_OP (default all_gather), RDMX_FAIR_SIZES (default
# 4K,64K,1M), RDMX_FAIR_BURST, RDMX_FAIR_PERIOD, RDMX_FAIR_ROUNDS (default 3;
# each cell is the median of the rounds). Bench packages (Open MPI's
# headers) come from scripts/deps.sh --bench. Results in BUILD/bench/fairness-*.
set -uo pipefail

build=${1:?usage: bench/fairness/run.sh BUILD_DIR [--spin LIST]}
shift
spins="default 0 50 2000"
while [[ $# -gt 0 ]]; do
  case $1 in
    --spin) spins=${2:?--spin needs a list}; shift ;;
    *) echo "bench/fairness/run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
op=${RDMX_FAIR_OP:-all_gather}
sizes=${RDMX_FAIR_SIZES:-4K,64K,1M}
burst=${RDMX_FAIR_BURST:-0.4}
period=${RDMX_FAIR_PERIOD:-1.0}
out=$build/bench/fairness-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"

# burner SECONDS FILE: busy for $burst of every $period, for SECONDS at most
# or until SIGINT; writes "LOOPS SECONDS" (busy loops done, time it ran) to FILE.
burner() {
  exec python3 - "$1" "$2" "$burst" "$period" <<'EOF'
import sys, time
seconds, path, burst, period = float(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
began = time.monotonic()
end = began + seconds
loops = 0
try:
    while time.monotonic() < end:
        start = time.monotonic()
        while time.monotonic() - start < burst:
            for _ in range(1000):
                pass
            loops += 1
        time.sleep(max(0.0, period - burst))
except KeyboardInterrupt:
    pass
open(path, "w").write("%d %.3f" % (loops, time.monotonic() - began))
EOF
}

# sweep NAME CONFIGS [SPIN]: one run_coll.sh pass, its JSON lines in $out/NAME.jsonl.
sweep() {
  local name=$1 configs=$2 spin=${3:-default}
  local env=(RDMX_BENCH_CONFIGS="$configs" RDMX_BENCH_NP=2 RDMX_BENCH_OPS="$op" RDMX_BENCH_BIG_SIZES="$sizes"
             RDMX_BENCH_SIZES="$sizes" RDMX_BENCH_JSON="$out/$name.jsonl" RDMX_BENCH_TIMEOUT=120)
  [[ $spin != default ]] && env+=(RDMX_SPIN_US="$spin")
  echo "== $name: $configs${3:+, RDMX_SPIN_US=$spin}"
  env "${env[@]}" bash "$root/bench/run_coll.sh" "$build" >"$out/$name.log" 2>&1 || echo "   (exit $?; $out/$name.log)"
}

rounds=${RDMX_FAIR_ROUNDS:-3}
echo "fairness: $op at $sizes, 2 ranks; a burner busy ${burst} s of every ${period} s; $rounds rounds; out: $out"
configs=()
for spin in $spins; do configs+=("rdmx-$spin"); done
configs+=(mpi)
# Rounds interleave every configuration idle and under bursts, so that a
# host that drifts moves them all alike; the table keeps each cell's median.
for ((r = 1; r <= rounds; r++)); do
  (burner 6 "$out/alone-r$r.loops")
  echo "== round $r: the burner alone: $(cat "$out/alone-r$r.loops") (loops, seconds)"
  for config in "${configs[@]}"; do
    if [[ $config == mpi ]]; then set -- mpi-vader default; else set -- rdmx-shm "${config#rdmx-}"; fi
    sweep "idle-$config-r$r" "$1" "$2"
    burner 600 "$out/burst-$config-r$r.loops" &
    bp=$!
    sweep "burst-$config-r$r" "$1" "$2"
    kill -INT "$bp" 2>/dev/null
    wait "$bp" 2>/dev/null
  done
done
python3 "$here/table.py" "$out"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make bench-torch`: the torch.distributed backend "rdmx" beside Gloo, and
# beside `rdmx perf coll` (the same collectives without torch), in one run.
#
#   bash bench/torch/run.sh BUILD [--quick] [--update-doc]
#
# 1. Collectives from Python (bench/coll/torch_coll_perf.py): all_reduce,
#    all_gather (all_gather_into_tensor), reduce_scatter
#    (reduce_scatter_tensor) and broadcast, fp32, 4 B to 64 MiB, on 2 and 4
#    local ranks; backend rdmx, backend gloo, and `rdmx perf coll` with the
#    provider the backend picks (auto: shm between local ranks). nccl-tests'
#    timing and sizes; every result checked.
# 2. What a call costs on 1 rank, where no byte moves (bench/torch/dispatch_cost.py):
#    torch's Python layer, and the backend beneath it.
# 3. Training steps (bench/torch/ddp_step.py), 2 ranks, rdmx against gloo:
#    DDP of a compute-bound MLP (communication a few percent of a step; run
#    RDMX_BENCH_REPEATS times, default 3, alternating the backends), and DDP
#    (with and without gradient_as_bucket_view) and FSDP2 of a
#    communication-heavy MLP.
# Tables on stdout (bench/torch/tables.py); --update-doc also writes them
# between `<!-- torch:begin -->` and `<!-- torch:end -->` in docs/PERFORMANCE.md.
#
# Every rank runs one thread (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1). The
# DDP runs preload jemalloc with page return turned off (MALLOC_CONF) when it
# is installed (scripts/deps.sh --bench): without it every backward pass
# page-faults fresh gradient buffers in, which on this VM costs ~0.4 s per
# 64 MB and would swamp the step (docs/PERFORMANCE.md says more).
#
# RDMX_BENCH_NP (default "2 4"), RDMX_BENCH_SIZES, RDMX_BENCH_ROUNDS (best of,
# default 1), RDMX_BENCH_TIMEOUT (seconds per program, default 600),
# RDMX_BENCH_PYTHON (default: the pinned torch's interpreter, bench/common.sh's bench_python).
set -euo pipefail

usage() { echo "usage: $0 BUILD [--quick] [--update-doc]" >&2; exit 2; }
(($# >= 1)) || usage
build=$(cd "$1" && pwd)
shift
quick=0 update_doc=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --update-doc) update_doc=1 ;;
    *) usage ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=bench/common.sh
source "$here/../common.sh"
bench_name=bench-torch
py=$(bench_python)
rdmx=$build/tools/rdmx
coll_src=$repo/bench/coll/torch_coll_perf.py
ddp_src=$here/ddp_step.py
limit=${RDMX_BENCH_TIMEOUT:-600}
read -r -a nps <<<"${RDMX_BENCH_NP:-2 4}"
sizes=${RDMX_BENCH_SIZES:-4,64,1K,4K,16K,64K,256K,1M,4M,16M,64M}
rounds=${RDMX_BENCH_ROUNDS:-1}
ops=(all_reduce all_gather reduce_scatter broadcast)
ddp_steps=10
perf_quick=() coll_quick=()
if ((quick)); then
  sizes=4,64K,1M
  ddp_steps=2
  perf_quick=(-n 5 -w 1)
  coll_quick=(--iters 5 --warmup 1)
fi
started=$(date +%s)
bench_workdir bench-torch
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 RDMX_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
json=$work/rows.jsonl
: >"$json"
: >"$work/commands"

if ! versions=$("$py" -c 'import torch, rdmx.torch; print(torch.__version__, rdmx.__version__)' 2>"$work/import.err"); then
  cat "$work/import.err" >&2
  echo "bench-torch: $py cannot import torch and rdmx.torch from $build/python (make build; scripts/deps.sh installs the pinned torch)" >&2
  exit 1
fi
[[ -x $rdmx ]] || { echo "bench-torch: $rdmx is not built (make build)" >&2; exit 1; }
jemalloc=$(ls /usr/lib/*/libjemalloc.so.2 2>/dev/null | head -1 || true)
echo "bench-torch: torch/rdmx $versions under $py; $(getconf _NPROCESSORS_ONLN) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench-torch: sizes $sizes, ranks ${nps[*]}, $rounds round(s)$( ((quick)) && echo ', QUICK: not a measurement')"

record() {
  echo "$*" >>"$work/commands"
  echo "+ $*"
}

# ranks NAME NP [VAR=VALUE...] -- COMMAND...: NP processes with torch's env://
# variables, each bounded by $limit; if one fails the others are stopped.
ranks() {
  local name=$1 np=$2 port r pid rc=0 failed=0
  shift 2
  local vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  port=$(bench_free_port)
  record "${vars[*]} WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK={0..$((np - 1))} $*"
  local pids=()
  for ((r = 0; r < np; r++)); do
    env "${vars[@]}" RANK=$r WORLD_SIZE="$np" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      timeout --kill-after=5 "$limit" "$@" >"$work/$name.$r.log" 2>&1 </dev/null &
    pids+=("$!")
  done
  bench_pids=("${pids[@]}")
  for pid in "${pids[@]}"; do
    rc=0
    wait "$pid" || rc=$?
    if ((rc != 0 && !failed)); then
      failed=$rc
      for r in "${pids[@]}"; do kill -TERM "$r" 2>/dev/null || true; done
    fi
  done
  bench_pids=()
  grep -vE '^# *$' "$work/$name.0.log" || true
  if ((failed)); then
    for ((r = 0; r < np; r++)); do tail -n 5 "$work/$name.$r.log" >&2; done
    bench_fail "$name: exit $failed"
  fi
}

# Tags each JSON line of a run with its configuration and round.
collect() {
  local part=$1 config=$2 round=$3
  [[ -s $part ]] || return 0
  sed "s/^{/{\"config\":\"$config\",\"round\":$round,/" "$part" >>"$json"
  rm -f "$part"
}

# perf_coll ROUND OP SIZES NP: `rdmx perf coll` over the provider the backend picks.
perf_coll() {
  local round=$1 op=$2 op_sizes=$3 np=$4
  local name=perf.$op.$np.r$round
  record "$rdmx perf coll $op --sizes $op_sizes --np $np --provider auto --json-lines PART"
  bench_bounded "$work/$name.log" - "$rdmx" perf coll "$op" --sizes "$op_sizes" --np "$np" \
    --provider auto --json-lines "$work/$name.jsonl" "${perf_quick[@]}"
  grep -E '^ +[0-9]' "$work/$name.log" || true
  ((bench_rc == 0)) || { cat "$work/$name.log" >&2; bench_fail "rdmx perf coll $op np=$np: exit $bench_rc"; }
  collect "$work/$name.jsonl" perf-coll "$round"
}

for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds: collectives"
  for np in "${nps[@]}"; do
    for op in "${ops[@]}"; do
      perf_coll "$round" "$op" "$sizes" "$np"
      for backend in rdmx gloo; do
        part=$work/$backend.$op.$np.jsonl
        ranks "$backend.$op.$np" "$np" -- "$py" "$coll_src" --backend "$backend" --op "$op" \
          --sizes "$sizes" --json "$part" "${coll_quick[@]}"
        collect "$part" "torch-$backend" "$round"
      done
    done
  done
done

echo "== what a call costs: torch's Python layer and the backend beneath it (a 4 B all_reduce)"
perf_coll 1 all_reduce 4 1
for np in 1 "${nps[@]}"; do
  for backend in rdmx gloo; do
    ranks "dispatch.$backend.$np" "$np" -- "$py" "$here/dispatch_cost.py" --backend "$backend" \
      --json "$work/dispatch.jsonl"
  done
done
collect "$work/dispatch.jsonl" dispatch 1

echo "== training steps, 2 ranks"
ddp_env=()
if [[ -n $jemalloc ]]; then
  ddp_env=(LD_PRELOAD="$jemalloc" MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1)
else
  echo "bench-torch: no libjemalloc2 (scripts/deps.sh --bench installs it): the DDP steps include page faults" >&2
fi
repeats=${RDMX_BENCH_REPEATS:-3}
((quick)) && repeats=1
variants=()
for ((i = 0; i < repeats; i++)); do variants+=(small-mlp); done
variants+=(mlp mlp:--bucket-view mlp:--fsdp)
for variant in "${variants[@]}"; do
  model=${variant%%:*}
  extra=()
  [[ $variant != *:* ]] || extra=("${variant#*:}")
  for backend in rdmx gloo; do
    ranks "ddp.$model${extra[*]}.$backend" 2 "${ddp_env[@]}" -- "$py" "$ddp_src" --backend "$backend" \
      --model "$model" "${extra[@]}" --steps "$ddp_steps" --json "$work/ddp.jsonl"
  done
done
collect "$work/ddp.jsonl" ddp 1

table=$work/table.md
"$py" "$here/tables.py" "$json" "$work/commands" "$rounds" "$quick" "$versions" >"$table"
echo
cat "$table"
mkdir -p "$build/bench"
cp "$json" "$build/bench/torch-$(date +%Y%m%d-%H%M%S).jsonl"
if ((update_doc && quick)); then
  echo "bench-torch: --quick figures are not a measurement: docs/PERFORMANCE.md left alone"
elif ((update_doc)); then
  bench_update_doc "$repo/docs/PERFORMANCE.md" "$table" torch "The torch.distributed backend (make bench-torch)" \
    </dev/null || { echo "bench-torch: cannot update docs/PERFORMANCE.md" >&2; exit 1; }
  echo "bench-torch: tables written into docs/PERFORMANCE.md"
fi
echo "bench-torch: done in $(($(date +%s) - started)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
((bench_errors == 0)) || { echo "bench-torch: $bench_errors run(s) failed" >&2; exit 1; }

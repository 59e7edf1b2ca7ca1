#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/run_coll.sh <build dir>: rdmx's collectives against Open MPI and Gloo,
# all ranks on this host, side by side in one markdown table per operation and
# rank count (`make bench-coll` runs it):
#   rdmx shm   BUILD/tools/rdmx perf coll --provider shm (rdmx starts the ranks)
#   mpi vader  bench/coll/mpi_coll_perf.c under mpirun --mca pml ob1 --mca btl self,vader
#   rdmx tcp   rdmx perf coll --provider tcp over loopback
#   mpi tcp    mpi_coll_perf under --mca btl self,tcp --mca btl_tcp_if_include lo
#   gloo       bench/coll/torch_coll_perf.py --backend gloo, torch.distributed "gloo" (TCP, loopback)
# The three measure the same way (nccl-tests' sizes, algbw and busbw; a
# barrier, then back-to-back calls, time per call averaged over the ranks) and
# check every result; see the header of mpi_coll_perf.c. The two peers take
# the flags of the old rdmx_coll_perf (--op, --type, --redop, ...); `rdmx perf
# coll` takes nccl-tests' (the collective first, -d, -o, -r, -c, -n, -w) and
# writes the same JSON objects with --json-lines.
#
# Runs, for each rank count: all_reduce fp32 sum at every size, all_gather and
# broadcast at 1M and 64M; each program in turn, one after the other. The
# table shows, per size, the out-of-place and the in-place row (broadcast is in
# place only in all three APIs, gloo's all_reduce too), time per call (us) and
# busbw (GB/s, 1e9) of each, the ratios rdmx shm / best shm peer and rdmx tcp
# / gloo as speed-ups (peer time / rdmx time: > 1 means rdmx is faster), and
# the #wrong of every run. A run that fails shows "failed (rc N)" and the
# script goes on; rdmx's columns say "skipped" when BUILD/tools/rdmx is not
# built or cannot run a 4-byte all_reduce (a probe before the runs).
#
# Knobs: RDMX_BENCH_NP (rank counts, default "2 4"), RDMX_BENCH_SIZES
# (all_reduce sizes, default 4,4K,64K,1M,16M,64M), RDMX_BENCH_BIG_SIZES
# (all_gather and broadcast sizes, default 1M,64M), RDMX_BENCH_OPS (default
# "all_reduce all_gather broadcast"), RDMX_BENCH_CONFIGS (the columns to run,
# default "rdmx-shm mpi-vader rdmx-tcp mpi-tcp gloo"), RDMX_BENCH_ROUNDS (default 1: the whole
# sequence runs that many times and each row keeps its best round, rdmx and
# peers alike), RDMX_BENCH_QUICK=1 (5 iterations and 1 warm-up per size: a
# smoke test of the harness, not a measurement), RDMX_BENCH_TIMEOUT (seconds
# one process may run, default 300), RDMX_BENCH_JSON (where all JSON lines go,
# default BUILD/bench/coll-<date>.jsonl; each line carries "config" and
# "round" besides the program's fields), RDMX_BENCH_STATUS (a directory that
# gets, as the runs go, "status": one line "config op np round rc" per run,
# and "skipped": one line "config reason..." per configuration left out;
# bench/peers/run.sh reads them), RDMX_BENCH_PYTHON (the interpreter that runs
# Gloo, default bench_python's: the pinned torch of scripts/deps.sh). RDMX_* (e.g. RDMX_SPIN_US), OMPI_MCA_* and
# GLOO_* variables in the environment reach the programs as usual.
# RDMX_BENCH_BASELINE (another build directory): the configurations
# rdmx-shm-base and rdmx-tcp-base run its rdmx the same way, beside this
# build's, and the tables gain "vs baseline" ratios (baseline time / this
# build's); e.g. RDMX_BENCH_CONFIGS="rdmx-shm rdmx-shm-base" compares two
# versions' algorithm choices in one run.
#
# Exit status: 0, or 1 when a run failed or returned wrong results (rdmx runs
# skipped after a failed probe do not count), 2 on a bad invocation.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <build dir>" >&2
  exit 2
fi
build=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/common.sh
source "$here/common.sh"
rdmx_bin=$build/tools/rdmx
baseline=${RDMX_BENCH_BASELINE:-}
mpi_srcs=("$here"/coll/mpi_coll_perf.c "$here"/coll/mpi_coll_args.c "$here"/coll/mpi_coll_model.c)
gloo_src=$here/coll/torch_coll_perf.py
py=$(bench_python)

read -r -a nps <<<"${RDMX_BENCH_NP:-2 4}"
sizes=${RDMX_BENCH_SIZES:-4,4K,64K,1M,16M,64M}
big_sizes=${RDMX_BENCH_BIG_SIZES:-1M,64M}
read -r -a ops <<<"${RDMX_BENCH_OPS:-all_reduce all_gather broadcast}"
rounds=${RDMX_BENCH_ROUNDS:-1}
quick=${RDMX_BENCH_QUICK:-0}
limit=${RDMX_BENCH_TIMEOUT:-300}
stamp=$(date +%Y%m%d-%H%M%S)
json_out=${RDMX_BENCH_JSON:-$build/bench/coll-$stamp.jsonl}
read -r -a configs <<<"${RDMX_BENCH_CONFIGS:-rdmx-shm mpi-vader rdmx-tcp mpi-tcp gloo}"
cores=$(nproc)
# The peers' flags, and the same in `rdmx perf coll`'s spelling.
common_args=(--type fp32 --redop sum --root 0 --check 1)
rdmx_args=(-d float -o sum -r 0 -c 1)
if [[ $quick == 1 ]]; then
  common_args+=(--iters 5 --warmup 1)
  rdmx_args+=(-n 5 -w 1)
fi

for tool in timeout "$py"; do
  if ! command -v "$tool" >/dev/null; then
    echo "run_coll: $tool not found" >&2
    exit 2
  fi
done
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "run_coll: RDMX_BENCH_ROUNDS must be a positive number, not '$rounds'" >&2
  exit 2
fi

bench_workdir rdmx-bench-coll

mkdir -p "$(dirname "$json_out")"
: >"$json_out"
status_dir=${RDMX_BENCH_STATUS:-$work}
mkdir -p "$status_dir"
status_file=$status_dir/status  # one line per run: config op np round rc
skipped_list=$status_dir/skipped  # one line per configuration left out: config reason
: >"$status_file"
: >"$skipped_list"
errors=0

# Prints a command as it could be typed again (words quoted only where the shell needs it).
show() {
  local word line=
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      line+=" $word"
    else
      printf -v word '%q' "$word"
      line+=" $word"
    fi
  done
  echo "+$line"
}

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_ranks NAME NP RANKVAR [VAR=VALUE...] -- COMMAND...: NP processes of
# COMMAND, rank r with RANKVAR=r, each bounded by `timeout`. When one fails
# (other than exit 4, wrong results, which every rank reaches together), the
# others are stopped, since they would wait for it until their own timeout.
# Sets run_rc: rank 0's exit status, or the first failing rank's.
run_ranks() {
  local name=$1 np=$2 rankvar=$3 r pid rc p
  shift 3
  local assignments=()
  while [[ $1 != -- ]]; do
    assignments+=("$1")
    shift
  done
  shift
  local -A rank_of=()
  local pids=() rcs=()
  for ((r = 0; r < np; r++)); do
    env "${assignments[@]}" "$rankvar=$r" timeout --kill-after=5 "$limit" "$@" >"$work/$name.rank$r.log" 2>&1 </dev/null &
    pids+=("$!")
    rank_of[$!]=$r
  done
  bench_pids=("${pids[@]}")
  local remaining=$np stopped=0 first_failure=-1
  while ((remaining > 0)); do
    rc=0
    pid=
    wait -n -p pid "${pids[@]}" || rc=$?
    [[ -n $pid ]] || break
    r=${rank_of[$pid]}
    rcs[r]=$rc
    remaining=$((remaining - 1))
    local alive=()
    for p in "${pids[@]}"; do
      [[ $p == "$pid" ]] || alive+=("$p")
    done
    pids=("${alive[@]}")
    bench_pids=("${pids[@]}")  # only processes not yet reaped: a reaped pid may be reused
    if ((rc != 0 && rc != 4 && first_failure < 0)); then
      first_failure=$r
      if ((!stopped)); then
        stopped=1
        for p in "${pids[@]}"; do
          kill -TERM "$p" 2>/dev/null || true
        done
      fi
    fi
  done
  run_rc=${rcs[0]:-1}
  if ((run_rc == 0 && first_failure >= 0)); then
    run_rc=${rcs[first_failure]}
  elif ((first_failure >= 0 && first_failure != 0 && run_rc == 143)); then
    run_rc=${rcs[first_failure]}  # rank 0 was stopped because another rank failed
  fi
  # Keep rank 0's table as the run's log; the others only matter when it failed.
  cp "$work/$name.rank0.log" "$work/$name.log"
  if ((run_rc != 0 && run_rc != 4)); then
    for ((r = 1; r < np; r++)); do
      if [[ ${rcs[r]:-0} != 0 ]]; then
        { echo "-- rank $r (exit ${rcs[r]}):"; tail -n 20 "$work/$name.rank$r.log"; } >>"$work/$name.log"
      fi
    done
  fi
}

# Appends a run's JSON lines, tagged with its configuration and round, and records its status.
collect() {
  local name=$1 config=$2 op=$3 np=$4 round=$5 rc=$6
  if [[ -s $work/$name.part ]]; then
    sed "s/^{/{\"config\":\"$config\",\"round\":$round,/" "$work/$name.part" >>"$json_out"
  fi
  rm -f "$work/$name.part"
  echo "$config $op $np $round $rc" >>"$status_file"
  # The program's table (rank 0); everything else it said when it failed.
  if ((rc == 0 || rc == 4)); then
    grep -E '^#|^ +[0-9]' "$work/$name.log" || true
    grep -vE '^#|^ +[0-9]' "$work/$name.log" >&2 || true
  else
    cat "$work/$name.log" >&2
  fi
  case $rc in
    0) ;;
    3) echo "run_coll: $config $op np=$np: unsupported by this library (exit 3)" >&2 ;;
    4) echo "run_coll: $config $op np=$np: WRONG RESULTS (exit 4)" >&2; errors=$((errors + 1)) ;;
    124 | 137) echo "run_coll: $config $op np=$np: timed out after ${limit}s (exit $rc)" >&2; errors=$((errors + 1)) ;;
    *) echo "run_coll: $config $op np=$np: failed (exit $rc)" >&2; errors=$((errors + 1)) ;;
  esac
}

# run_rdmx NAME PROVIDER NP ARGS...: `rdmx perf coll ARGS --np NP`, which
# starts the NP local ranks itself (and stops them all when one fails).
run_rdmx() {
  local name=$1 provider=$2 np=$3 bin=$rdmx_bin
  shift 3
  [[ $name != rdmx-*-base.* ]] || bin=$baseline/tools/rdmx
  local cmd=(env RDMX_SOCKET_IFNAME=lo timeout --kill-after=5 "$limit" "$bin" perf coll "$@" --np "$np"
             --provider "$provider")
  show "${cmd[@]}"
  run_rc=0
  "${cmd[@]}" >"$work/$name.log" 2>&1 </dev/null &
  local pid=$!
  bench_pids=("$pid")
  wait "$pid" || run_rc=$?
  bench_pids=()
}

run_gloo() {
  local name=$1 np=$2 port
  shift 2
  port=$(free_port)
  local assignments=(WORLD_SIZE="$np" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" GLOO_SOCKET_IFNAME=lo)
  echo "+ ${assignments[*]} RANK={0..$((np - 1))} timeout $limit $(show "$py" "$gloo_src" "$@" | cut -c3-)"
  run_ranks "$name" "$np" RANK "${assignments[@]}" -- "$py" "$gloo_src" "$@"
}

run_mpi() {
  local name=$1 btl=$2 np=$3
  shift 3
  local args=(-np "$np" --oversubscribe --bind-to none --mca pml ob1)
  ((EUID != 0)) || args+=(--allow-run-as-root)
  if [[ $btl == vader ]]; then
    args+=(--mca btl self,vader)
  else
    args+=(--mca btl self,tcp --mca btl_tcp_if_include lo)
  fi
  # More ranks than cores: Open MPI's ranks must yield the CPU while they poll,
  # or a rank spins while the peer it waits for has no core (measured on this
  # 2-core VM, np=4 vader all_reduce: 4 B 17700 us with mpi_yield_when_idle 0,
  # 2.8 us with 1; 64 MiB 235 ms against 150-180 ms). mpirun turns it on by
  # itself when it sees the oversubscription; we pass it explicitly so the peer
  # runs at its best whatever the slot count says.
  if ((np > cores)); then
    args+=(--mca mpi_yield_when_idle 1)
  fi
  show timeout --kill-after=5 "$limit" mpirun "${args[@]}" "$work/mpi_coll_perf" "$@"
  run_rc=0
  timeout --kill-after=5 "$limit" mpirun "${args[@]}" "$work/mpi_coll_perf" "$@" >"$work/$name.log" 2>&1 </dev/null &
  local pid=$!
  bench_pids=("$pid")
  wait "$pid" || run_rc=$?
  bench_pids=()
}

# --- what can run ------------------------------------------------------------
echo "run_coll: $cores CPUs ($(uname -r)), ranks ${nps[*]}, ops ${ops[*]}, $rounds round(s)$([[ $quick == 1 ]] && echo ", QUICK (5 iterations: not a measurement)")"
echo "run_coll: load average $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every figure)"
declare -A skip=()
if [[ -x $rdmx_bin ]]; then
  for provider in shm tcp; do
    echo "== probe: rdmx perf coll over $provider, 2 ranks, a 4-byte all_reduce"
    saved_limit=$limit
    limit=60
    run_rdmx "probe-$provider" "$provider" 2 all_reduce --sizes 4 -n 5 -w 1
    limit=$saved_limit
    if ((run_rc != 0)); then
      cat "$work/probe-$provider.log" >&2
      echo "run_coll: rdmx perf coll over $provider does not run (exit $run_rc): its columns are skipped" >&2
      skip[rdmx-$provider]="skipped (probe exit $run_rc)"
    fi
  done
else
  echo "run_coll: $rdmx_bin is not built (make build): rdmx columns skipped" >&2
  skip[rdmx-shm]="skipped (not built)"
  skip[rdmx-tcp]="skipped (not built)"
fi
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  echo "run_coll: $(mpirun --version 2>/dev/null | head -1)"
  show mpicc -O2 -std=c11 -o "$work/mpi_coll_perf" "${mpi_srcs[@]}" -lm
  if ! mpicc -O2 -std=c11 -o "$work/mpi_coll_perf" "${mpi_srcs[@]}" -lm >"$work/mpicc.log" 2>&1; then
    cat "$work/mpicc.log" >&2
    echo "run_coll: mpicc failed: mpi columns skipped" >&2
    skip[mpi-vader]="skipped (mpicc failed)"
    skip[mpi-tcp]="skipped (mpicc failed)"
    errors=$((errors + 1))
  fi
else
  echo "run_coll: no mpicc/mpirun (scripts/deps.sh --bench installs openmpi-bin libopenmpi-dev): mpi columns skipped" >&2
  skip[mpi-vader]="skipped (no Open MPI)"
  skip[mpi-tcp]="skipped (no Open MPI)"
fi
if torch_version=$("$py" -c 'import torch, torch.distributed as d; assert d.is_gloo_available(); print(torch.__version__)' 2>/dev/null); then
  echo "run_coll: torch $torch_version (gloo) under $py"
else
  echo "run_coll: $py cannot import torch with gloo (scripts/deps.sh installs the pinned torch): gloo skipped" >&2
  skip[gloo]="skipped (no torch)"
fi

for config in "${configs[@]}"; do
  if [[ $config == rdmx-*-base ]]; then
    if [[ -z $baseline ]]; then
      skip[$config]="skipped (no RDMX_BENCH_BASELINE)"
    elif [[ ! -x $baseline/tools/rdmx ]]; then
      skip[$config]="skipped ($baseline/tools/rdmx not built)"
    elif [[ -n ${skip[${config%-base}]:-} ]]; then
      skip[$config]=${skip[${config%-base}]}
    fi
  fi
done
for config in "${!skip[@]}"; do
  echo "$config ${skip[$config]}" >>"$skipped_list"
done

# --- the runs ----------------------------------------------------------------
for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds"
  for np in "${nps[@]}"; do
    for op in "${ops[@]}"; do
      op_sizes=$big_sizes
      [[ $op != all_reduce ]] || op_sizes=$sizes
      for config in "${configs[@]}"; do
        [[ -z ${skip[$config]:-} ]] || continue
        name="$config.$op.np$np.r$round"
        args=(--op "$op" --sizes "$op_sizes" "${common_args[@]}" --json "$work/$name.part")
        rdmx_run_args=("$op" --sizes "$op_sizes" "${rdmx_args[@]}" --json-lines "$work/$name.part")
        echo "== $config: $op, $np ranks"
        case $config in
          rdmx-shm) run_rdmx "$name" shm "$np" "${rdmx_run_args[@]}" ;;
          rdmx-tcp) run_rdmx "$name" tcp "$np" "${rdmx_run_args[@]}" ;;
          rdmx-shm-base) run_rdmx "$name" shm "$np" "${rdmx_run_args[@]}" ;;
          rdmx-tcp-base) run_rdmx "$name" tcp "$np" "${rdmx_run_args[@]}" ;;
          mpi-vader) run_mpi "$name" vader "$np" "${args[@]}" ;;
          mpi-tcp) run_mpi "$name" tcp "$np" "${args[@]}" ;;
          gloo) run_gloo "$name" "$np" "${args[@]}" ;;
        esac
        collect "$name" "$config" "$op" "$np" "$round" "$run_rc"
      done
    done
  done
done
echo "run_coll: load average $(cut -d' ' -f1-3 /proc/loadavg)"

# --- the tables ----------------------------------------------------------------
"$py" - "$json_out" "$status_file" "$skipped_list" "$rounds" "${nps[*]}" "${ops[*]}" "$quick" "${configs[*]}" <<'EOF'
import json, sys
json_path, status_path, skipped_path, rounds, nps, ops, quick, asked = sys.argv[1:]
nps = [int(n) for n in nps.split()]
ops = ops.split()
configs = ["rdmx-shm", "rdmx-shm-base", "mpi-vader", "rdmx-tcp", "rdmx-tcp-base", "mpi-tcp", "gloo"]
configs = [c for c in configs if c in asked.split()]
labels = {"rdmx-shm": "rdmx shm", "mpi-vader": "mpi vader", "rdmx-tcp": "rdmx tcp", "mpi-tcp": "mpi tcp",
          "gloo": "gloo", "rdmx-shm-base": "rdmx shm baseline", "rdmx-tcp-base": "rdmx tcp baseline"}
bases = [c for c in configs if c.endswith("-base")]
shm_peers = ["mpi-vader"]  # peers that move data through shared memory

skipped = {}
for line in open(skipped_path):
    config, _, reason = line.strip().partition(" ")
    skipped[config] = reason
status = {}  # (config, op, np) -> exit codes of its rounds
for line in open(status_path):
    config, op, np, _round, rc = line.split()
    status.setdefault((config, op, int(np)), []).append(int(rc))

best = {}    # (config, op, np, bytes, inplace) -> the best round's row
wrong = {}   # the same key -> the largest #wrong over the rounds
for line in open(json_path):
    line = line.strip()
    if not line:
        continue
    row = json.loads(line)
    key = (row["config"], row["op"], row["np"], row["bytes"], row["inplace"])
    if key not in best or row["time_us"] < best[key]["time_us"]:
        best[key] = row
    if row.get("wrong") is not None:
        wrong[key] = max(wrong.get(key, 0), row["wrong"])

def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"

def fmt_time(us):
    return f"{us:.3f}" if us < 10 else f"{us:.2f}" if us < 100 else f"{us:.1f}" if us < 10000 else f"{us:.0f}"

def fmt_bw(gbps):
    return f"{gbps:.3f}" if gbps < 10 else f"{gbps:.2f}"

def missing(config, op, np):
    """Why a configuration has no figure for a row."""
    if config in skipped:
        return skipped[config]
    rcs = status.get((config, op, np))
    if not rcs:
        return "not run"
    if all(rc == 3 for rc in rcs):
        return "unsupported"
    failed = [rc for rc in rcs if rc not in (0, 4)]
    if failed and len(failed) == len(rcs):
        return f"failed (rc {failed[0]}{': timeout' if failed[0] in (124, 137) else ''})"
    return "n/a"

for op in ops:
    for np in nps:
        keys = sorted({(k[3], k[4]) for k in best if k[1] == op and k[2] == np})
        print()
        print(f"### {op}, fp32{' sum' if op in ('all_reduce', 'reduce_scatter', 'reduce') else ''}, {np} ranks"
              f"{' (QUICK: 5 iterations, not a measurement)' if quick == '1' else ''}")
        print()
        head = ["size", "place"]
        for c in configs:
            head += [f"{labels[c]} us", f"{labels[c]} GB/s"]
        head += ["rdmx shm vs best shm peer", "rdmx tcp vs gloo"] + [f"{labels[b[:-5]]} vs baseline" for b in bases]
        head += ["#wrong " + "/".join(labels[c] for c in configs)]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        if not keys:
            reasons = ", ".join(f"{labels[c]}: {missing(c, op, np)}" for c in configs)
            print(f"| (no figures) | | {reasons} |")
            continue
        for nbytes, inplace in sorted(keys, key=lambda k: (k[0], k[1])):
            cells = [size_label(nbytes), "in" if inplace else "out"]
            times = {}
            wrongs = []
            for c in configs:
                row = best.get((c, op, np, nbytes, inplace))
                if row is None:
                    cells += [missing(c, op, np), ""]
                    wrongs.append("-")
                    continue
                times[c] = row["time_us"]
                cells += [fmt_time(row["time_us"]), fmt_bw(row["busbw_GBps"])]
                w = wrong.get((c, op, np, nbytes, inplace))
                wrongs.append("-" if w is None else str(w))
            peer = min((times[p] for p in shm_peers if p in times), default=None)
            cells.append(f"{peer / times['rdmx-shm']:.2f}x" if peer and times.get("rdmx-shm") else "-")
            cells.append(f"{times['gloo'] / times['rdmx-tcp']:.2f}x" if "gloo" in times and times.get("rdmx-tcp") else "-")
            for b in bases:
                cells.append(f"{times[b] / times[b[:-5]]:.2f}x" if b in times and times.get(b[:-5]) else "-")
            cells.append("/".join(wrongs))
            print("| " + " | ".join(cells) + " |")

print()
print(f"Time: microseconds per call, averaged over the ranks; busbw: GB/s (1e9 B), nccl-tests' factors; best of "
      f"{rounds} round(s) per row. Ratios are peer time / rdmx time (> 1: rdmx faster); the best shm peer is "
      f"{', '.join(labels[p] for p in shm_peers)}; gloo runs over TCP on loopback. place: out = out-of-place, "
      f"in = in-place; n/a: the API has no such call.")
EOF
echo
echo "run_coll: JSON lines in $json_out"
if ((errors > 0)); then
  echo "run_coll: $errors run(s) failed or returned wrong results" >&2
  exit 1
fi

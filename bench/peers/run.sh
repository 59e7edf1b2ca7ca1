#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/peers/run.sh BUILD_DIR [--quick]: rdmx beside its peers, in one run,
# two (and four) local ranks, one table with ratios (`make bench-peers`).
#
#   point to point, 2 ranks: 8 B one-way latency (median, RTT/2) and
#   bandwidth at 64 KiB, 1 MiB and 4 MiB (GB/s = 1e9 B/s)
#     shm: `rdmx perf p2p write_lat|write_bw --provider shm`
#          vs UCX ucx_perftest ucp_put_lat|ucp_put_bw, UCX_TLS=sm,self
#             (posix/sysv mapped memory, cma)
#          vs Open MPI bench/mpi_pingpong.c pingpong|stream, pml ob1, btl self,vader
#     tcp: `rdmx perf p2p ... --provider tcp` on loopback
#          vs sockperf TCP ping-pong, busy-poll, 14 B (latency)
#          vs iperf3, one TCP stream, writes of the same size, 1 MiB at most
#             (iperf3's limit) (bandwidth)
#          vs UCX ucp_put_lat|ucp_put_bw, UCX_TLS=tcp,self
#          vs Open MPI mpi_pingpong, btl self,tcp on lo
#   all_reduce fp32 sum, in place, at 4 B, 64 KiB, 1 MiB, 16 MiB, 2 and 4
#   ranks (2 only with --quick), through bench/run_coll.sh:
#     rdmx shm vs Open MPI vader; rdmx tcp vs Open MPI tcp vs Gloo (torch)
#
# First it runs scripts/deps.sh --bench (Open MPI, UCX tools, sockperf, iperf3,
# python3-torch). The point-to-point runners are bench/common.sh's, the same
# that bench/run_shm.sh and bench/run_tcp.sh use; the collectives are
# bench/run_coll.sh with fewer sizes. The table (with the commands, date,
# commit and machine) is printed and written into docs/PERFORMANCE.md between
# the markers `<!-- peers:begin -->` and `<!-- peers:end -->`.
#
# Every process is bounded in time. A peer that is missing or fails shows
# "n/a (why)" in its cell and the script goes on; the exit status is 1 only
# when rdmx itself failed (or returned wrong results), 2 on a bad invocation.
# On this 2-core machine: about 2.2 minutes when nothing else runs (up to 4
# when other work loads it), --quick under 1 (up to 2.5).
#
# Knobs: RDMX_PEERS_ROUNDS (point-to-point rounds, best of; default 3, quick 1),
# RDMX_PEERS_COLL_ROUNDS (all_reduce rounds, best of; default 2, quick 1),
# RDMX_PEERS_SECONDS (sockperf and iperf3 run length, default 5, quick 2),
# RDMX_PEERS_NP (all_reduce rank counts, default "2 4", quick "2"),
# RDMX_PEERS_DOC (the markdown file to update, default docs/PERFORMANCE.md;
# empty: none), RDMX_PEERS_DEPS=0 (skip scripts/deps.sh), RDMX_BENCH_PYTHON
# (the interpreter that runs Gloo, default bench_python's).
set -euo pipefail

usage() {
  echo "usage: $0 BUILD_DIR [--quick]" >&2
  exit 2
}
build=
quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) usage ;;
    -*) echo "peers: unknown option '$arg'" >&2; usage ;;
    *) [[ -z $build ]] || usage; build=$arg ;;
  esac
done
[[ -n $build ]] || usage

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
rdmx=$build/tools/rdmx
started=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

if ((quick)); then
  rounds=${RDMX_PEERS_ROUNDS:-1}
  coll_rounds=${RDMX_PEERS_COLL_ROUNDS:-1}
  bench_peer_seconds=${RDMX_PEERS_SECONDS:-2}
  nps=${RDMX_PEERS_NP:-2}
  coll_limit=150
else
  rounds=${RDMX_PEERS_ROUNDS:-3}
  coll_rounds=${RDMX_PEERS_COLL_ROUNDS:-2}
  bench_peer_seconds=${RDMX_PEERS_SECONDS:-5}
  nps=${RDMX_PEERS_NP:-2 4}
  coll_limit=360
fi
doc=${RDMX_PEERS_DOC-$root/docs/PERFORMANCE.md}
limit=60  # seconds per process
lat_iters=20000
bw_sizes=64K,1M,4M
coll_sizes=4,64K,1M,16M
export RDMX_SOCKET_IFNAME=${RDMX_SOCKET_IFNAME:-lo}

if [[ ${RDMX_PEERS_DEPS:-1} != 0 ]]; then
  echo "== scripts/deps.sh --bench"
  timeout 900 bash "$root/scripts/deps.sh" --bench ||
    echo "peers: scripts/deps.sh --bench failed; the peers it would install show n/a" >&2
fi
for tool in "$rdmx" python3 ss timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "peers: $tool not found (make build)" >&2
    exit 2
  fi
done

bench_name=peers
# shellcheck source=bench/common.sh
source "$here/../common.sh"
bench_workdir rdmx-peers
commands=$work/commands  # what ran, one command per line, for the document
: >"$commands"

# note TEXT: a command as the document shows it (once, in the order first run).
note() {
  grep -qxF -- "$1" "$commands" || echo "$1" >>"$commands"
}
note "export RDMX_SOCKET_IFNAME=$RDMX_SOCKET_IFNAME  # rdmx's tcp provider on loopback, as the peers"

# Bandwidth: every size with the same budget, as bench/run_shm.sh does.
lat_plan="$lat_iters 1000 8"
bw_plan=$(bench_plan "$bw_sizes" 100000 1G 16)

rdmx_p2p() {
  local name=$1
  shift
  note "$rdmx perf p2p $*"
  bench_rdmx_p2p "$name" "$@"
}
rdmx_bw() {
  local name=$1 provider=$2 n warmup group
  while read -r n warmup group; do
    rdmx_p2p "$name" write_bw --provider "$provider" --size "$group" --iters "$n" --warmup "$warmup"
  done <<<"$bw_plan"
}
ucx() {
  local name=$1 tls=$2 test=$3 plan_lines=$4 n warmup group size
  ucx_tls=$tls
  ucx_flags=()
  while read -r n warmup group; do
    for size in ${group//,/ }; do
      note "UCX_TLS=$tls ucx_perftest -t $test -s $size -n $n -w $warmup (server: ucx_perftest; client: ucx_perftest localhost)"
    done
  done <<<"$plan_lines"
  bench_ucx "$name" "$test" "$plan_lines"
}
mpi() {
  local name=$1 btl=$2 mode=$3
  shift 3
  local extra=
  [[ $btl != tcp ]] || extra=" --mca btl_tcp_if_include lo"
  ((EUID != 0)) || extra+=" --allow-run-as-root"
  note "mpirun -n 2 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,$btl$extra mpi_pingpong $mode $*"
  bench_mpi_p2p "$name" "$btl" "$mode" "$@"
}
sockperf_busy() {
  note "sockperf server --tcp -i 127.0.0.1 --nonblocked --timeout 0; sockperf ping-pong --tcp -i 127.0.0.1 -m 14 -t $bench_peer_seconds --nonblocked --timeout 0"
  bench_sockperf "$1" --nonblocked --timeout 0
}
# iperf3 writes at most 1 MiB at a time: the 4 MiB row compares with 1 MiB writes.
iperf() {
  local round=$1 size
  for size in 64K 1M; do
    note "iperf3 -s -1; iperf3 -c 127.0.0.1 -l $size -t $bench_peer_seconds -J"
    bench_iperf3 "tcp.iperf3_$size.r$round" "$size"
  done
}

echo "peers: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $rounds round(s)$( ((quick)) && echo ", --quick"); scratch $work"
note "mpicc -O2 -o mpi_pingpong bench/mpi_pingpong.c"
bench_build_mpi_pingpong
[[ -n $mpi_pingpong ]] || echo "peers: Open MPI: $bench_mpi_why; its cells are n/a" >&2

# --- point to point: each round runs everything once; the table keeps the best round.
for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds: shm"
  rdmx_p2p "shm.rdmx_lat.r$round" write_lat --provider shm --size 8 --iters "$lat_iters" --warmup 1000
  ucx "shm.ucx_lat.r$round" sm,self ucp_put_lat "$lat_plan"
  mpi "shm.mpi_lat.r$round" vader pingpong --size 8 --iters "$lat_iters"
  rdmx_bw "shm.rdmx_bw.r$round" shm
  ucx "shm.ucx_bw.r$round" sm,self ucp_put_bw "$bw_plan"
  mpi "shm.mpi_bw.r$round" vader stream --size "$bw_sizes" --iters 100000 --bytes $((1 << 30))
  echo "== round $round of $rounds: tcp (loopback)"
  rdmx_p2p "tcp.rdmx_lat.r$round" write_lat --provider tcp --size 8 --iters "$lat_iters" --warmup 1000
  sockperf_busy "tcp.sockperf.r$round"
  ucx "tcp.ucx_lat.r$round" tcp,self ucp_put_lat "$lat_plan"
  mpi "tcp.mpi_lat.r$round" tcp pingpong --size 8 --iters "$lat_iters"
  rdmx_bw "tcp.rdmx_bw.r$round" tcp
  iperf "$round"
  ucx "tcp.ucx_bw.r$round" tcp,self ucp_put_bw "$bw_plan"
  mpi "tcp.mpi_bw.r$round" tcp stream --size "$bw_sizes" --iters 100000 --bytes $((1 << 30))
done
p2p_seconds=$(($(date +%s) - started))

# --- all_reduce through bench/run_coll.sh (its own table goes to the log).
echo "== all_reduce: bench/run_coll.sh, ranks $nps, sizes $coll_sizes, $coll_rounds round(s)"
coll_rc=0
RDMX_BENCH_OPS=all_reduce RDMX_BENCH_SIZES=$coll_sizes RDMX_BENCH_NP=$nps RDMX_BENCH_ROUNDS=$coll_rounds \
  RDMX_BENCH_QUICK=0 RDMX_BENCH_TIMEOUT=$limit RDMX_BENCH_JSON=$work/coll.jsonl RDMX_BENCH_STATUS=$work/coll \
  timeout --kill-after=10 "$coll_limit" bash "$here/../run_coll.sh" "$build" >"$work/coll.log" 2>&1 </dev/null &
coll_pid=$!
bench_pids+=("$coll_pid")
wait "$coll_pid" || coll_rc=$?
bench_forget "$coll_pid"
grep -E '^\+ |^run_coll:|^\| ' "$work/coll.log" || true
case $coll_rc in
  0 | 1) ;;  # 1: some run failed; the table says which
  124 | 137) echo "peers: bench/run_coll.sh ran past ${coll_limit}s and was stopped" >&2 ;;
  *) echo "peers: bench/run_coll.sh exit $coll_rc" >&2; tail -n 30 "$work/coll.log" >&2 ;;
esac
# Its commands (not the probes), without timeouts, scratch paths and ports.
grep -E '^\+ ' "$work/coll.log" | grep -vE -- '--sizes 4 -n 5 -w 1' |
  sed -E "s#^\+ ##; s# --json(-lines)? [^ ]+##; s#timeout (--kill-after=[0-9]+ )?[0-9]+ ##;
          s#[^ ]*/rdmx-bench-coll\.[^/ ]+/##g; s#$root/##g; s#MASTER_PORT=[0-9]+#MASTER_PORT=PORT#" |
  while IFS= read -r line; do note "$line"; done || true

elapsed=$(($(date +%s) - started))
machine="$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1048576)) GiB, kernel $(uname -r)"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$root" status --porcelain 2>/dev/null | head -1) ]]; then
  commit+=" (with uncommitted changes)"
fi
# The peers' versions, "NAME VERSION; ..." ("NAME none" for one that does not answer).
version() {
  local name=$1 text
  shift
  text=$(timeout 10 "$@" 2>/dev/null | head -n 1 | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?[a-z0-9]*' | head -n 1) || true
  echo "$name ${text:-none}"
}
versions="$(version UCX ucx_info -v); $(version "Open MPI" mpirun --version); $(version sockperf sockperf --version);"
versions+=" $(version iperf3 iperf3 --version); $(version torch "$(bench_python)" -c 'import torch; print(torch.__version__)')"

table=$work/table.md
status=0
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$here/.. python3 - "$work" "$table" "$rounds" "$coll_rounds" "$quick" "$bench_peer_seconds" "$nps" "$coll_sizes" \
  "$(date '+%Y-%m-%d %H:%M %Z')" "$commit" "$machine" "$versions" "$elapsed" "$p2p_seconds" "$coll_rc" \
  "$coll_limit" "$build" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF' || status=$?
import json, os, sys
from results import best, best_row, why, size_label, figure

(work, table_path, rounds, coll_rounds, quick, peer_seconds, nps, coll_sizes, date, commit, machine, versions,
 elapsed, p2p_seconds, coll_rc, coll_limit, build, load_start, load_end) = sys.argv[1:]
rounds, quick, elapsed, coll_rc = int(rounds), quick == "1", int(elapsed), int(coll_rc)
nps = [int(n) for n in nps.split()]
rdmx_failed = []  # what rdmx itself failed to measure (the exit status)

def size_bytes(text):
    shift = {"K": 10, "M": 20, "G": 30}.get(text[-1:].upper(), 0)
    return int(text[:-1] if shift else text) << shift

def na(reason):
    return f"n/a ({reason})" if reason else "n/a"

# A measurement: (value, None) or (None, why).
def p2p(name, key, lowest, size):
    row = best(work, name, key, lowest).get(size)
    if row:
        return row[key], None
    return None, why(work, name) or "no result"

def one(name, key, lowest):
    row = best_row(work, name, key, lowest)
    if row:
        return row[key], None
    return None, why(work, name) or "no result"

def cell(m):
    value, reason = m
    return figure(value) if value is not None else na(reason)

def ratio(rdmx, peer):
    if rdmx[0] is None or peer[0] is None or peer[0] == 0:
        return "-"
    return f"{rdmx[0] / peer[0]:.2f}"

out = []
w = out.append
w(f"Generated by `bash bench/peers/run.sh {build}{' --quick' if quick else ''}` on {date}, commit {commit}.")
w(f"Machine: {machine}. Peers: {versions}.")
w(f"The script took {elapsed} s ({p2p_seconds} s point to point, the rest all_reduce); load average "
  f"{load_start} at the start, {load_end} at the end."
  + (" **--quick**: one round, 2 ranks only; rougher figures." if quick else ""))
w("")
w(f"**Point to point, 2 ranks on this host**, best of {rounds} round(s) per figure. Latency: one-way "
  f"(RTT/2) median in us, lower is better, so rdmx / peer < 1 means rdmx is faster. Bandwidth: GB/s "
  f"(1e9 B/s), higher is better, so rdmx / peer > 1 means rdmx is faster.")
w("")

bw_list = [size_bytes(s) for s in "64K,1M,4M".split(",")]

def rows_for(section, peers):
    """peers: [(label, ratio label, latency(), bandwidth(size))], each giving (value, why)."""
    head = [section, "better", "rdmx"]
    for label, ratio_label, *_ in peers:
        head += [label, "rdmx / " + ratio_label]
    w("| " + " | ".join(head) + " |")
    w("|" + "---|" * len(head))
    rdmx_lat = p2p(f"{section}.rdmx_lat", "t_typical_us", True, 8)
    if rdmx_lat[0] is None:
        rdmx_failed.append(f"{section} 8 B latency: {rdmx_lat[1]}")
    cells = ["8 B latency, us", "lower", cell(rdmx_lat)]
    for _label, _ratio_label, lat, _bw in peers:
        m = lat()
        cells += [cell(m), ratio(rdmx_lat, m)]
    w("| " + " | ".join(cells) + " |")
    for size in bw_list:
        rdmx_bw = p2p(f"{section}.rdmx_bw", "bw_avg_gb_s", False, size)
        if rdmx_bw[0] is None:
            rdmx_failed.append(f"{section} {size_label(size)} bandwidth: {rdmx_bw[1]}")
        cells = [f"{size_label(size)} bandwidth, GB/s", "higher", cell(rdmx_bw)]
        for _label, _ratio_label, _lat, bw in peers:
            m = bw(size)
            cells += [cell(m), ratio(rdmx_bw, m)]
        w("| " + " | ".join(cells) + " |")

rows_for("shm", [
    ("UCX put (sm,self)", "UCX", lambda: p2p("shm.ucx_lat", "p50_us", True, 8),
     lambda s: p2p("shm.ucx_bw", "bw_gb_s", False, s)),
    ("Open MPI vader", "OMPI", lambda: p2p("shm.mpi_lat", "p50_us", True, 8),
     lambda s: p2p("shm.mpi_bw", "bw_gb_s", False, s)),
])
w("")
rows_for("tcp", [
    ("sockperf, iperf3", "sockperf, iperf3", lambda: one("tcp.sockperf", "p50_us", True),
     lambda s: one("tcp.iperf3_" + ("64K" if s == 65536 else "1M"), "bw_gb_s", False)),
    ("UCX put (tcp,self)", "UCX", lambda: p2p("tcp.ucx_lat", "p50_us", True, 8),
     lambda s: p2p("tcp.ucx_bw", "bw_gb_s", False, s)),
    ("Open MPI tcp", "OMPI", lambda: p2p("tcp.mpi_lat", "p50_us", True, 8),
     lambda s: p2p("tcp.mpi_bw", "bw_gb_s", False, s)),
])
w("")
w("shm: rdmx `write_lat`/`write_bw` (perftest's ib_write_lat/ib_write_bw) into memory from "
  "`allocate_memory`; UCX `ucp_put_lat`/`ucp_put_bw` into `ucp_mem_map`ped memory; Open MPI "
  "`MPI_Send`/`MPI_Recv` ping-pong and `MPI_Isend` windows (bench/mpi_pingpong.c). tcp: the same over "
  f"loopback; sockperf's latency is busy-poll TCP ping-pong with 14 B (its minimum) for {peer_seconds} s, "
  f"iperf3 one stream with writes of the row's size for {peer_seconds} s (1 MiB in the 4 MiB row: iperf3 "
  f"writes 1 MiB at most).")
w("")

# --- all_reduce
status_dir = os.path.join(work, "coll")
skipped, status = {}, {}
if os.path.exists(os.path.join(status_dir, "skipped")):
    for line in open(os.path.join(status_dir, "skipped")):
        config, _, reason = line.strip().partition(" ")
        skipped[config] = reason.replace("skipped (", "").rstrip(")") if reason.startswith("skipped (") else reason
if os.path.exists(os.path.join(status_dir, "status")):
    for line in open(os.path.join(status_dir, "status")):
        config, op, np, _round, rc = line.split()
        status[(config, int(np))] = int(rc)
rows = {}
json_path = os.path.join(work, "coll.jsonl")
if os.path.exists(json_path):
    for line in open(json_path):
        if line.strip():
            row = json.loads(line)
            if row["op"] == "all_reduce" and row["inplace"]:
                key = (row["config"], row["np"], row["bytes"])
                if key not in rows or row["time_us"] < rows[key]["time_us"]:
                    rows[key] = row

def coll(config, np, size):
    row = rows.get((config, np, size))
    if row:
        wrong = row.get("wrong") or 0
        if wrong and config.startswith("rdmx"):
            rdmx_failed.append(f"{config} np={np} {size_label(size)}: {wrong} wrong")
        return (row["time_us"], None) if not wrong else (None, f"{wrong} wrong")
    if config in skipped:
        reason = skipped[config]
    elif (config, np) in status:
        rc = status[(config, np)]
        reason = {0: "no row", 3: "unsupported", 4: "wrong results", 124: "timed out", 137: "timed out"}.get(
            rc, f"exit {rc}")
    elif coll_rc in (124, 137):
        reason = f"not reached in {coll_limit} s"
    else:
        reason = "not run"
    if config.startswith("rdmx"):
        rdmx_failed.append(f"{config} np={np} {size_label(size)}: {reason}")
    return None, reason

w(f"**all_reduce, fp32 sum, in place** (Gloo has no out-of-place all_reduce), time per call in us "
  f"(nccl-tests' timing, averaged over the ranks; bench/run_coll.sh), best of {coll_rounds} round(s), lower "
  f"is better: rdmx / peer < 1 means rdmx is faster. Every result checked (`-c 1`).")
w("")
head = ["size", "ranks", "rdmx shm", "OMPI vader", "rdmx / vader", "rdmx tcp", "OMPI tcp", "rdmx / OMPI tcp",
        "Gloo", "rdmx tcp / Gloo"]
w("| " + " | ".join(head) + " |")
w("|" + "---|" * len(head))
for np in nps:
    for size in [size_bytes(s) for s in coll_sizes.split(",")]:
        shm, vader, tcp, mtcp, gloo = (coll(c, np, size) for c in ("rdmx-shm", "mpi-vader", "rdmx-tcp", "mpi-tcp",
                                                                    "gloo"))
        w("| " + " | ".join([size_label(size), str(np), cell(shm), cell(vader), ratio(shm, vader), cell(tcp),
                            cell(mtcp), ratio(tcp, mtcp), cell(gloo), ratio(tcp, gloo)]) + " |")
w("")
commands = [line.rstrip("\n") for line in open(os.path.join(work, "commands")) if line.strip()]
w("<details><summary>The commands (each bounded by <code>timeout</code>)</summary>")
w("")
w("```sh")
out.extend(commands)
w("```")
w("")
w("</details>")
if rdmx_failed:
    w("")
    w("**rdmx failed:** " + "; ".join(rdmx_failed))
with open(table_path, "w") as f:
    f.write("\n".join(out) + "\n")
sys.exit(3 if rdmx_failed else 0)
EOF
if ((status != 0 && status != 3)); then
  echo "peers: cannot build the table (exit $status)" >&2
  exit 1
fi
echo
cat "$table"

if [[ -n $doc ]]; then
  bench_update_doc "$doc" "$table" peers "Side by side with the peers (bench/peers/run.sh)" <<'INTRO' ||
`make bench-peers` (or `bash bench/peers/run.sh BUILD [--quick]`) runs rdmx and its peers in one go
and rewrites this section's table.
INTRO
    { echo "peers: cannot update $doc" >&2; exit 1; }
  echo "peers: table written into $doc"
fi
echo "peers: done in $(($(date +%s) - started)) s"
if ((status != 0 || bench_rdmx_errors > 0)); then
  echo "peers: rdmx failed (see above)" >&2
  exit 1
fi

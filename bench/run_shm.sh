#!/usr/bin/env bash
# bench/run_shm.sh <build dir>: rdmx's shm provider against its peers, two
# processes on this host, in one table (`make bench-shm` runs it):
#   rdmx      rdmx_perf write_lat (p50 one-way, as ib_write_lat) and write_bw
#   UCX       ucx_perftest ucp_put_lat and ucp_put_bw over UCX_TLS=sm,self
#   Open MPI  bench/mpi_pingpong.c over btl self,vader (pml ob1): pingpong
#             (RTT/2) and stream (windows of MPI_Isend, osu_bw style)
# every size from 8 B to 64 MiB (powers of two), the same iterations per size
# for the three. Targets: 8 B one-way latency p50 <= 0.17 usec; 4 MiB
# bandwidth >= 16 GB/s. A missed target is reported, not an error; the exit
# status is non-zero only when something failed to run. Every process is
# bounded by `timeout` and stopped on exit.
#
# Knobs: RDMX_BENCH_PROVIDER (default shm; tcp runs the script before shm
# exists), RDMX_BENCH_ROUNDS (default 3: the whole sequence runs that many
# times and each figure is the best round, the same for rdmx and its peers),
# RDMX_BENCH_SIZES (default 8..64M; a comma list such as 8,4K,4M also does;
# RDMX_BENCH_LAT_SIZES and RDMX_BENCH_BW_SIZES override it per test),
# RDMX_BENCH_LAT_ITERS (default 20000) and RDMX_BENCH_LAT_BYTES (default 256M:
# big sizes run fewer ping-pongs, so that about that much moves each way, 20 at
# least), RDMX_BENCH_BW_ITERS (default 100000) and RDMX_BENCH_BW_BYTES (default
# 1G: messages per size, likewise, 16 at least), RDMX_BENCH_TIMEOUT (seconds a
# process may run, default 120), RDMX_BENCH_UCX_API (ucp, the default, honours
# UCX_TLS; uct runs put_lat/put_bw on one transport, RDMX_BENCH_UCX_TL, default
# posix), RDMX_BENCH_UCX_TLS (default sm,self). Open MPI takes OMPI_MCA_* from
# the environment as usual.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <build dir>" >&2
  exit 2
fi
build=$1
here=$(cd "$(dirname "$0")" && pwd)
perf=$build/bench/rdmx_perf
# Extra rdmx_perf arguments, e.g. --heap (registered heap memory instead of
# allocate_memory(): every message then goes through the target process).
read -r -a perf_args <<<"${RDMX_BENCH_PERF_ARGS:-}"
provider=${RDMX_BENCH_PROVIDER:-shm}
rounds=${RDMX_BENCH_ROUNDS:-3}
lat_sizes=${RDMX_BENCH_LAT_SIZES:-${RDMX_BENCH_SIZES:-8..64M}}
bw_sizes=${RDMX_BENCH_BW_SIZES:-${RDMX_BENCH_SIZES:-8..64M}}
lat_iters=${RDMX_BENCH_LAT_ITERS:-20000}
lat_bytes=${RDMX_BENCH_LAT_BYTES:-256M}
bw_iters=${RDMX_BENCH_BW_ITERS:-100000}
bw_bytes=${RDMX_BENCH_BW_BYTES:-1G}
limit=${RDMX_BENCH_TIMEOUT:-120}  # per process
ucx_api=${RDMX_BENCH_UCX_API:-ucp}
ucx_tl=${RDMX_BENCH_UCX_TL:-posix}
ucx_tls=${RDMX_BENCH_UCX_TLS:-sm,self}
# Only the tcp provider (RDMX_BENCH_PROVIDER=tcp) reads it: stay on loopback.
export RDMX_SOCKET_IFNAME=${RDMX_SOCKET_IFNAME:-lo}

for tool in "$perf" ucx_perftest mpicc mpirun python3 ss timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "run_shm: $tool not found (make build; scripts/deps.sh --bench installs ucx-utils and Open MPI)" >&2
    exit 2
  fi
done
case $ucx_api in
  ucp) ucx_lat_test=ucp_put_lat ucx_bw_test=ucp_put_bw ucx_flags=() ;;
  uct) ucx_lat_test=put_lat ucx_bw_test=put_bw ucx_flags=(-x "$ucx_tl" -d memory) ;;
  *) echo "run_shm: RDMX_BENCH_UCX_API must be ucp or uct, not '$ucx_api'" >&2; exit 2 ;;
esac

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_workdir rdmx-bench-shm

errors=0
fail() {
  echo "run_shm: ERROR: $*" >&2
  errors=$((errors + 1))
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_listening() {
  local port=$1 i
  for ((i = 0; i < 100; i++)); do
    [[ -n $(ss -Htln "sport = :$port") ]] && return 0
    sleep 0.05
  done
  return 1
}

stop() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# plan SIZES ITERS BYTES FLOOR: one line "iters warmup size,size,..." per run of
# consecutive sizes that get the same counts. Each size runs ITERS, or fewer so
# that about BYTES move, FLOOR at least; warm-up is a tenth of that, 1000 at most.
plan() {
  python3 - "$@" <<'EOF'
import sys
def size(text):
    shift = {"K": 10, "M": 20, "G": 30}.get(text[-1:].upper(), 0)
    value = int(text[:-1] if shift else text) << shift
    if not 1 <= value <= 1 << 30:
        raise SystemExit(f"run_shm: size {text!r} is out of [1, 1G]")
    return value
spec, iters, budget, floor = sys.argv[1], int(sys.argv[2]), size(sys.argv[3]), int(sys.argv[4])
if ".." in spec:
    low, high = (size(part) for part in spec.split(".."))
    sizes = []
    while low <= high:
        sizes.append(low)
        low *= 2
else:
    sizes = [size(part) for part in spec.split(",") if part]
if not sizes:
    raise SystemExit(f"run_shm: no sizes in {spec!r}")
groups = []
for s in sizes:
    n = max(floor, min(iters, budget // s))
    warmup = max(1, min(1000, n // 10))
    if groups and groups[-1][:2] == [n, warmup]:
        groups[-1][2].append(s)
    else:
        groups.append([n, warmup, [s]])
for n, warmup, group in groups:
    print(n, warmup, ",".join(map(str, group)))
EOF
}
lat_plan=$(plan "$lat_sizes" "$lat_iters" "$lat_bytes" 20) || exit 2
bw_plan=$(plan "$bw_sizes" "$bw_iters" "$bw_bytes" 16) || exit 2
bytes_of() { python3 -c 'import sys; t = sys.argv[1]; s = {"K": 10, "M": 20, "G": 30}.get(t[-1:].upper(), 0); print(int(t[:-1] if s else t) << s)' "$1"; }
lat_bytes_n=$(bytes_of "$lat_bytes")
bw_bytes_n=$(bytes_of "$bw_bytes")

# run_rdmx NAME ARGS...: both ranks of rdmx_perf; rank 0's JSON lines are appended to $work/NAME.json.
rdmx_missing=0
run_rdmx() {
  local name=$1 store rank0 rank1 status0=0 status1=0
  shift
  ((rdmx_missing)) && return
  store=$(mktemp -d "$work/store.XXXXXX")
  echo "== rdmx_perf --provider $provider $*"
  RDMX_RANK=1 RDMX_WORLD_SIZE=2 RDMX_STORE="file:$store" \
    timeout --kill-after=5 "$limit" "$perf" --provider "$provider" "${perf_args[@]}" "$@" >"$work/$name.rank1.log" 2>&1 &
  rank1=$!
  bench_pids+=("$rank1")
  RDMX_RANK=0 RDMX_WORLD_SIZE=2 RDMX_STORE="file:$store" \
    timeout --kill-after=5 "$limit" "$perf" --provider "$provider" "${perf_args[@]}" "$@" --json "$work/$name.part" \
    >"$work/$name.rank0.log" 2>&1 &
  rank0=$!
  bench_pids+=("$rank0")
  wait "$rank0" || status0=$?
  # A failed rank 0 leaves rank 1 waiting until RDMX_TIMEOUT; do not wait for that.
  if ((status0 != 0)); then
    kill -TERM "$rank1" 2>/dev/null || true
  fi
  wait "$rank1" || status1=$?
  grep -E '^ [0-9]' "$work/$name.rank0.log" || true
  if ((status0 != 0 || status1 != 0)); then
    echo "-- rank 0:" >&2
    cat "$work/$name.rank0.log" >&2
    echo "-- rank 1:" >&2
    cat "$work/$name.rank1.log" >&2
    fail "rdmx_perf --provider $provider $* (rank 0 exit $status0, rank 1 exit $status1)"
    # Not built in (yet): one error says it; the peers still run.
    if grep -q "unknown provider" "$work/$name.rank0.log"; then
      echo "run_shm: provider '$provider' is not in $perf; skipping the other rdmx runs" >&2
      rdmx_missing=1
    fi
  elif [[ -f $work/$name.part ]]; then
    cat "$work/$name.part" >>"$work/$name.json"
  fi
  rm -rf "$store" "$work/$name.part"
}

# run_ucx NAME TEST PLAN: one ucx_perftest server and client, a batch line per
# size; the client's CSV goes to $work/NAME.json as JSON lines.
run_ucx() {
  local name=$1 test=$2 plan_lines=$3 port server status=0 n warmup group size batch=$work/$1.batch
  : >"$batch"
  while read -r n warmup group; do
    for size in ${group//,/ }; do
      echo "$size -t $test -s $size -n $n -w $warmup ${ucx_flags[*]}" >>"$batch"
    done
  done <<<"$plan_lines"
  port=$(free_port)
  if [[ $ucx_api == ucp ]]; then
    echo "== UCX_TLS=$ucx_tls ucx_perftest -t $test ($(wc -l <"$batch") sizes)"
  else
    echo "== ucx_perftest -t $test ${ucx_flags[*]} ($(wc -l <"$batch") sizes)"
  fi
  # Both sides read the batch file: the server runs each line's test in turn.
  UCX_TLS=$ucx_tls timeout --kill-after=5 "$limit" ucx_perftest -p "$port" -b "$batch" \
    >"$work/$name.server.log" 2>&1 &
  server=$!
  bench_pids+=("$server")
  if ! wait_listening "$port"; then
    fail "ucx_perftest server did not listen on port $port"
    cat "$work/$name.server.log" >&2
    stop "$server"
    return
  fi
  UCX_TLS=$ucx_tls timeout --kill-after=5 "$limit" ucx_perftest localhost -p "$port" -b "$batch" -v \
    >"$work/$name.csv" 2>"$work/$name.err" || status=$?
  stop "$server"
  # ucx_perftest reports a failed test on stdout and may still exit 0.
  if ((status != 0)) || grep -qE "UCX +ERROR" "$work/$name.err" "$work/$name.csv"; then
    cat "$work/$name.err" "$work/$name.csv" "$work/$name.server.log" >&2
    fail "ucx_perftest -t $test (exit $status)"
    return
  fi
  grep -hE "UCX +WARN" "$work/$name.err" "$work/$name.csv" "$work/$name.server.log" >&2 || true
  # CSV: name(=size),iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr;
  # latencies in usec (RTT/2 for the latency tests), bandwidth in MB/s of 2^20 bytes.
  python3 - "$work/$name.csv" "$work/$name.json" "$batch" "$test" <<'EOF' || fail "cannot parse ucx_perftest output ($name)"
import json, sys
csv_path, json_path, batch_path, test = sys.argv[1:]
# The batch line of each size: "SIZE -t TEST -s SIZE -n ITERS ...".
wanted = {}
for line in open(batch_path):
    words = line.split()
    if words:
        wanted[int(words[0])] = int(words[words.index("-n") + 1])
rows = {}
for line in open(csv_path):
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 9 or not fields[0].isdigit():
        continue
    # A test that runs past a second also prints progress rows ("[thread 0] 124")
    # before its final one; only the final one, with every iteration, counts.
    iterations = fields[1].split()[-1]
    size = int(fields[0])
    if size not in wanted or not iterations.isdigit() or int(iterations) != wanted[size]:
        continue
    p50, avg, bw = float(fields[2]), float(fields[3]), float(fields[6])
    rows[size] = {"mode": test, "bytes": size, "iterations": int(iterations), "p50_us": p50, "avg_us": avg,
                  "bw_mib_s": bw, "bw_gb_s": bw * 2**20 / 1e9}
missing = [size for size in wanted if size not in rows]
if missing:
    raise SystemExit(f"no final result for sizes {missing}")
with open(json_path, "a") as out:
    for size in sorted(rows):
        row = rows[size]
        print(f" {size:>10} {row['iterations']:>8}  p50 {row['p50_us']:10.3f} us  avg {row['avg_us']:10.3f} us"
              f"  {row['bw_gb_s']:8.3f} GB/s")
        out.write(json.dumps(row) + "\n")
EOF
  if [[ ! -s $work/$name.json ]]; then
    cat "$work/$name.err" "$work/$name.csv" >&2
  fi
}

# run_mpi NAME MODE ARGS...: both ranks of mpi_pingpong under mpirun; JSON lines to $work/NAME.json.
run_mpi() {
  local name=$1 mode=$2 status=0
  shift 2
  echo "== mpirun -n 2 --mca pml ob1 --mca btl self,vader mpi_pingpong $mode $*"
  timeout --kill-after=5 "$limit" mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 \
    --mca pml ob1 --mca btl self,vader "$work/mpi_pingpong" "$mode" "$@" --json "$work/$name.part" \
    >"$work/$name.log" 2>&1 </dev/null || status=$?
  grep -vE '^#' "$work/$name.log" | grep -E '^ +[0-9]' || true
  if ((status != 0)); then
    cat "$work/$name.log" >&2
    fail "mpirun mpi_pingpong $mode (exit $status)"
  elif [[ -f $work/$name.part ]]; then
    cat "$work/$name.part" >>"$work/$name.json"
  fi
  rm -f "$work/$name.part"
  # Anything else Open MPI said (warnings, help messages) is worth seeing.
  grep -vE '^#|^ +[0-9]' "$work/$name.log" >&2 || true
}

echo "run_shm: provider $provider, $(nproc) CPUs ($(uname -r)), $rounds round(s); scratch $work"
echo "run_shm: UCX $(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p'), $(mpirun --version 2>/dev/null | head -1)"
mpi_built=1
if ! mpicc -O2 -o "$work/mpi_pingpong" "$here/mpi_pingpong.c" >"$work/mpicc.log" 2>&1; then
  cat "$work/mpicc.log" >&2
  fail "mpicc $here/mpi_pingpong.c"
  mpi_built=0
fi

for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds"
  while read -r n warmup group; do
    run_rdmx "rdmx_lat.r$round" --mode write_lat --size "$group" --iters "$n" --warmup "$warmup"
  done <<<"$lat_plan"
  run_ucx "ucx_lat.r$round" "$ucx_lat_test" "$lat_plan"
  if ((mpi_built)); then
    run_mpi "mpi_lat.r$round" pingpong --size "$lat_sizes" --iters "$lat_iters" --bytes "$lat_bytes_n"
  fi
  # Bandwidth runs back to back, so the three see the same machine.
  while read -r n warmup group; do
    run_rdmx "rdmx_bw.r$round" --mode write_bw --size "$group" --iters "$n" --warmup "$warmup"
  done <<<"$bw_plan"
  run_ucx "ucx_bw.r$round" "$ucx_bw_test" "$bw_plan"
  if ((mpi_built)); then
    run_mpi "mpi_bw.r$round" stream --size "$bw_sizes" --iters "$bw_iters" --bytes "$bw_bytes_n"
  fi
done

ucx_label="UCX $ucx_lat_test/$ucx_bw_test, UCX_TLS=$ucx_tls"
[[ $ucx_api == uct ]] && ucx_label="UCX (UCT) $ucx_lat_test/$ucx_bw_test -x $ucx_tl"
python3 - "$work" "$rounds" "$provider" "$ucx_label" <<'EOF' || fail "cannot build the comparison table"
import json, os, re, sys
work, rounds, provider, ucx_label = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def load(name):
    """Every JSON line that the rounds of a run left (a failed run leaves none)."""
    rows = []
    for file in sorted(os.listdir(work)):
        if re.fullmatch(re.escape(name) + r"\.r\d+\.json", file):
            with open(os.path.join(work, file)) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows

def best(name, key, lowest):
    """Per size, the best round: the lowest latency or the highest rate."""
    by_size = {}
    for row in load(name):
        old = by_size.get(row["bytes"])
        if old is None or (row[key] < old[key] if lowest else row[key] > old[key]):
            by_size[row["bytes"]] = row
    return by_size

rdmx_lat = best("rdmx_lat", "t_typical_us", True)
ucx_lat = best("ucx_lat", "p50_us", True)
mpi_lat = best("mpi_lat", "p50_us", True)
rdmx_bw = best("rdmx_bw", "bw_avg_gb_s", False)
ucx_bw = best("ucx_bw", "bw_gb_s", False)
mpi_bw = best("mpi_bw", "bw_gb_s", False)

def cell(table, size, key, digits, width=10):
    """Fewer decimals for big figures, so that every column keeps its width."""
    row = table.get(size)
    if not row:
        return f"{'n/a':>{width}}"
    value = row[key]
    digits = min(digits, 1 if value >= 1000 else 2 if value >= 100 else digits)
    return f"{value:{width}.{digits}f}"

def size_label(size):
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"

sizes = sorted(set(rdmx_lat) | set(ucx_lat) | set(mpi_lat) | set(rdmx_bw) | set(ucx_bw) | set(mpi_bw))
rule = "=" * 96
print()
print(rule)
print(f" rdmx ({provider} provider) vs peers, 2 processes on this host, best of {rounds} round(s)")
print(f" rdmx: rdmx_perf write_lat / write_bw {os.environ.get('RDMX_BENCH_PERF_ARGS', '')}; {ucx_label};")
print(" Open MPI: mpi_pingpong pingpong / stream, pml ob1, btl self,vader")
print(" latency: one-way (RTT/2) median, usec; bandwidth: GB/s = 1e9 B/s, MB/s = 2^20 B/s (perftest's)")
print(rule)
print(f" {'':>7} |{'one-way latency p50, usec':^30} |{'bandwidth':^51}")
print(f" {'size':>7} |{'rdmx':>10}{'UCX put':>10}{'OMPI pp':>10} |"
      f"{'rdmx GB/s':>10}{'rdmx MB/s':>11}{'UCX GB/s':>10}{'UCX MB/s':>10}{'OMPI GB/s':>10}")
for size in sizes:
    print(f" {size_label(size):>7} |{cell(rdmx_lat, size, 't_typical_us', 3)}"
          f"{cell(ucx_lat, size, 'p50_us', 3)}{cell(mpi_lat, size, 'p50_us', 3)} |"
          f"{cell(rdmx_bw, size, 'bw_avg_gb_s', 3)}{cell(rdmx_bw, size, 'bw_avg_mib_s', 1, 11)}"
          f"{cell(ucx_bw, size, 'bw_gb_s', 3)}{cell(ucx_bw, size, 'bw_mib_s', 1)}"
          f"{cell(mpi_bw, size, 'bw_gb_s', 3)}")
print()
print(" targets (latency on the median, perftest's t_typical; GB = 1e9 bytes)")

def peers(ucx, mpi, size, key_ucx, key_mpi, unit, digits):
    parts = []
    for label, table, key in (("UCX", ucx, key_ucx), ("OMPI", mpi, key_mpi)):
        row = table.get(size)
        parts.append(f"{label} {row[key]:.{digits}f}" if row else f"{label} n/a")
    return f"   ({', '.join(parts)} {unit})"

row = rdmx_lat.get(8)
if row:
    ok = row["t_typical_us"] <= 0.17
    print(f"  8 B one-way latency p50 <= 0.17 usec:  {row['t_typical_us']:.3f} usec  {'met' if ok else 'MISSED'}"
          + peers(ucx_lat, mpi_lat, 8, "p50_us", "p50_us", "usec", 3))
else:
    print("  8 B one-way latency p50 <= 0.17 usec:  n/a (not measured, or the run failed)")
row = rdmx_bw.get(4 << 20)
if row:
    ok = row["bw_avg_gb_s"] >= 16
    print(f"  4 MiB bandwidth >= 16 GB/s:            {row['bw_avg_gb_s']:.3f} GB/s ({row['bw_avg_mib_s']:.0f} MB/s)"
          f"  {'met' if ok else 'MISSED'}" + peers(ucx_bw, mpi_bw, 4 << 20, "bw_gb_s", "bw_gb_s", "GB/s", 3))
else:
    print("  4 MiB bandwidth >= 16 GB/s:            n/a (not measured, or the run failed)")
print(rule)
EOF

if ((errors > 0)); then
  echo "run_shm: $errors run(s) failed" >&2
  exit 1
fi

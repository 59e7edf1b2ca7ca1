# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2154  # limit, rdmx, ucx_tls, ...: set by the sourcing script
# Sourced by the bench scripts (bench/run_tcp.sh, bench/run_shm.sh,
# bench/run_coll.sh, bench/peers/run.sh). The scratch directory, bounded
# runs, and one runner per program that the point-to-point comparisons use,
# so that the scripts measure rdmx and its peers the same way.
#
#   bench_workdir NAME          makes the scratch directory $work, removed at exit
#                               together with every process still listed in bench_pids
#   bench_fail MESSAGE          reports an error (prefix $bench_name) and counts it in bench_errors
#   bench_bounded OUT ERR CMD...  runs CMD bounded by $limit seconds (`timeout`), stdout to OUT,
#                               stderr to ERR (- : with stdout), stdin from /dev/null; sets bench_rc
#   bench_plan SIZES ITERS BYTES FLOOR   iterations per size (see the function)
#   bench_python                prints the interpreter with the pinned torch: RDMX_BENCH_PYTHON, else
#                               scripts/deps.sh's virtual environment (RDMX_VENV, ~/.cache/rdmx/venv), else python3
#
# Runners. Each leaves, on success, its rows as JSON lines appended to
# $work/NAME.json and, on failure, one line saying why in $work/NAME.why (read
# by bench/results.py); each prints the program's table rows as it goes:
#   bench_rdmx_p2p NAME TEST ARGS...      $rdmx perf p2p TEST ARGS (2 local ranks, started by rdmx)
#   bench_ucx NAME TEST PLAN              ucx_perftest server and client, UCX_TLS=$ucx_tls, ${ucx_flags[@]}
#   bench_mpi_p2p NAME BTL MODE ARGS...   $mpi_pingpong (bench/mpi_pingpong.c) under mpirun -n 2,
#                                         pml ob1, btl self,BTL (vader or tcp, tcp on lo)
#   bench_sockperf NAME FLAGS...          sockperf TCP ping-pong on 127.0.0.1, $bench_peer_seconds
#   bench_iperf3 NAME LENGTH              one iperf3 TCP stream on 127.0.0.1, LENGTH-byte writes
#
# What the caller sets: bench_name (message prefix), limit (seconds per
# process), rdmx (the rdmx command), bench_peer_seconds, ucx_tls and ucx_flags,
# mpi_pingpong (see bench_build_mpi_pingpong).
bench_pids=()
bench_errors=0
bench_rdmx_errors=0  # the failures of rdmx itself, a subset of bench_errors
bench_rdmx_missing=" " # providers rdmx said it lacks: their other runs are skipped
bench_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

bench_python() {
  if [[ -n ${RDMX_BENCH_PYTHON:-} ]]; then
    echo "$RDMX_BENCH_PYTHON"
    return
  fi
  local venv=${RDMX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdmx/venv}
  if [[ -x $venv/bin/python ]]; then echo "$venv/bin/python"; else command -v python3; fi
}

bench_cleanup() {
  local pid
  for pid in "${bench_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}

bench_workdir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

bench_fail() {
  echo "${bench_name:-bench}: ERROR: $*" >&2
  bench_errors=$((bench_errors + 1))
}

# bench_why NAME TEXT: the reason a run left no figures (the table's "n/a (TEXT)").
bench_why() {
  echo "$2" >"$work/$1.why"
}

# The words for an exit status, as the tables print them.
bench_status_text() {
  case $1 in
    124 | 137) echo "timed out after ${limit}s" ;;
    *) echo "exit $1" ;;
  esac
}

bench_forget() {
  local kept=() p
  for p in "${bench_pids[@]}"; do
    [[ $p == "$1" ]] || kept+=("$p")
  done
  bench_pids=("${kept[@]}")
}

# In the background and waited for, so that an interrupt ends the script at
# once (bench_cleanup then stops the command: timeout passes the signal on to
# everything the command started).
bench_bounded() {
  local out=$1 err=$2 pid
  shift 2
  bench_rc=0
  if [[ $err == - ]]; then
    timeout --kill-after=5 "$limit" "$@" >"$out" 2>&1 </dev/null &
  else
    timeout --kill-after=5 "$limit" "$@" >"$out" 2>"$err" </dev/null &
  fi
  pid=$!
  bench_pids+=("$pid")
  wait "$pid" || bench_rc=$?
  bench_forget "$pid"
}

# A server in the background, bounded by $limit; sets bench_server.
bench_start_server() {
  local log=$1
  shift
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1 </dev/null &
  bench_server=$!
  bench_pids+=("$bench_server")
}

bench_stop() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  bench_forget "$1"
}

bench_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits (up to 5 s) for a listener; probing with a connection would consume
# iperf3's single test.
bench_wait_listening() {
  local port=$1 i
  for ((i = 0; i < 100; i++)); do
    [[ -n $(ss -Htln "sport = :$port") ]] && return 0
    sleep 0.05
  done
  return 1
}

# bench_bytes 64K: 65536.
bench_bytes() {
  python3 -c 'import sys; t = sys.argv[1]; s = {"K": 10, "M": 20, "G": 30}.get(t[-1:].upper(), 0); print(int(t[:-1] if s else t) << s)' "$1"
}

# bench_plan SIZES ITERS BYTES FLOOR: one line "iters warmup size,size,..." per
# run of consecutive sizes that get the same counts. SIZES: LO..HI (powers of
# two) or a comma list (8,4K,4M). Each size runs ITERS, or fewer so that about
# BYTES move, FLOOR at least; warm-up is a tenth of that, 1000 at most.
bench_plan() {
  python3 - "$@" <<'EOF'
import sys
def size(text):
    shift = {"K": 10, "M": 20, "G": 30}.get(text[-1:].upper(), 0)
    value = int(text[:-1] if shift else text) << shift
    if not 1 <= value <= 1 << 30:
        raise SystemExit(f"bench: size {text!r} is out of [1, 1G]")
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
    raise SystemExit(f"bench: no sizes in {spec!r}")
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

# Keeps a run's JSON lines (NAME.part, written by the program) in NAME.json;
# fails when there are none.
bench_keep_rows() {
  local name=$1 what=$2
  if [[ -s $work/$name.part ]]; then
    cat "$work/$name.part" >>"$work/$name.json"
    rm -f "$work/$name.part"
    return 0
  fi
  bench_fail "$what wrote no results"
  bench_why "$name" "no results"
  return 1
}

# bench_rdmx_p2p NAME TEST ARGS...: `rdmx perf p2p`, which starts its two
# local ranks itself and prints rank 0's table.
bench_rdmx_p2p() {
  local name=$1 provider=auto previous='' arg
  shift
  for arg in "$@"; do
    [[ $previous != --provider ]] || provider=$arg
    previous=$arg
  done
  if [[ $bench_rdmx_missing == *" $provider "* ]]; then
    bench_why "$name" "rdmx lacks provider $provider"
    bench_rdmx_errors=$((bench_rdmx_errors + 1))
    return 0
  fi
  echo "== rdmx perf p2p $*"
  rm -f "$work/$name.part"
  bench_bounded "$work/$name.log" - "$rdmx" perf p2p "$@" --json-lines "$work/$name.part"
  grep -E '^ +[0-9]' "$work/$name.log" || true
  if ((bench_rc != 0)); then
    cat "$work/$name.log" >&2
    bench_fail "rdmx perf p2p $* ($(bench_status_text "$bench_rc"))"
    bench_rdmx_errors=$((bench_rdmx_errors + 1))
    bench_why "$name" "rdmx $(bench_status_text "$bench_rc")"
    rm -f "$work/$name.part"
    # Not built in: one error says it; the peers still run.
    if grep -qiE "unknown provider|provider .*(not built|not available|unavailable)" "$work/$name.log"; then
      echo "${bench_name:-bench}: rdmx lacks provider $provider; skipping its other runs" >&2
      bench_rdmx_missing+="$provider "
    fi
    return 0
  fi
  bench_keep_rows "$name" "rdmx perf p2p $*" || bench_rdmx_errors=$((bench_rdmx_errors + 1))
}

# bench_build_mpi_pingpong: compiles bench/mpi_pingpong.c into $work; sets
# mpi_pingpong, or leaves it empty and says why (bench_mpi_why).
bench_build_mpi_pingpong() {
  mpi_pingpong=
  bench_mpi_why=
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    bench_mpi_why="no Open MPI"
    return 0
  fi
  if ! mpicc -O2 -o "$work/mpi_pingpong" "$bench_here/mpi_pingpong.c" >"$work/mpicc.log" 2>&1; then
    cat "$work/mpicc.log" >&2
    bench_fail "mpicc $bench_here/mpi_pingpong.c"
    bench_mpi_why="mpicc failed"
    return 0
  fi
  mpi_pingpong=$work/mpi_pingpong
}

# bench_mpi_p2p NAME BTL MODE ARGS...: both ranks of mpi_pingpong under mpirun.
bench_mpi_p2p() {
  local name=$1 btl=$2 mode=$3
  shift 3
  if [[ -z ${mpi_pingpong:-} ]]; then
    bench_why "$name" "${bench_mpi_why:-not built}"
    return 0
  fi
  local args=(--oversubscribe --bind-to none -n 2 --mca pml ob1 --mca btl "self,$btl")
  ((EUID != 0)) || args+=(--allow-run-as-root)
  [[ $btl != tcp ]] || args+=(--mca btl_tcp_if_include lo)
  echo "== mpirun -n 2 --mca pml ob1 --mca btl self,$btl mpi_pingpong $mode $*"
  rm -f "$work/$name.part"
  bench_bounded "$work/$name.log" - mpirun "${args[@]}" "$mpi_pingpong" "$mode" "$@" --json "$work/$name.part"
  grep -vE '^#' "$work/$name.log" | grep -E '^ +[0-9]' || true
  if ((bench_rc != 0)); then
    cat "$work/$name.log" >&2
    bench_fail "mpirun mpi_pingpong $mode ($(bench_status_text "$bench_rc"))"
    bench_why "$name" "$(bench_status_text "$bench_rc")"
    rm -f "$work/$name.part"
  else
    bench_keep_rows "$name" "mpi_pingpong $mode" || true
    # Anything else Open MPI said (warnings, help messages) is worth seeing.
    grep -vE '^#|^ +[0-9]' "$work/$name.log" >&2 || true
  fi
}

# bench_ucx NAME TEST PLAN: one ucx_perftest server and client, a batch line
# per size of PLAN (bench_plan's lines); the client's CSV becomes JSON lines
# {"mode","bytes","iterations","p50_us","avg_us","bw_mib_s","bw_gb_s"}.
bench_ucx() {
  local name=$1 test=$2 plan_lines=$3 port n warmup group size batch=$work/$1.batch
  if ! command -v ucx_perftest >/dev/null; then
    bench_why "$name" "no ucx_perftest"
    return 0
  fi
  : >"$batch"
  while read -r n warmup group; do
    for size in ${group//,/ }; do
      echo "$size -t $test -s $size -n $n -w $warmup ${ucx_flags[*]}" >>"$batch"
    done
  done <<<"$plan_lines"
  port=$(bench_free_port)
  echo "== UCX_TLS=$ucx_tls ucx_perftest -t $test ${ucx_flags[*]} ($(wc -l <"$batch") sizes)"
  # Both sides read the batch file: the server runs each line's test in turn.
  bench_start_server "$work/$name.server.log" env UCX_TLS="$ucx_tls" ucx_perftest -p "$port" -b "$batch"
  if ! bench_wait_listening "$port"; then
    cat "$work/$name.server.log" >&2
    bench_fail "ucx_perftest server did not listen on port $port"
    bench_why "$name" "server did not start"
    bench_stop "$bench_server"
    return 0
  fi
  bench_bounded "$work/$name.csv" "$work/$name.err" env UCX_TLS="$ucx_tls" ucx_perftest localhost -p "$port" -b "$batch" -v
  bench_stop "$bench_server"
  # ucx_perftest reports a failed test on stdout and may still exit 0.
  if ((bench_rc != 0)) || grep -qE "UCX +ERROR" "$work/$name.err" "$work/$name.csv"; then
    cat "$work/$name.err" "$work/$name.csv" "$work/$name.server.log" >&2
    bench_fail "ucx_perftest -t $test ($(bench_status_text "$bench_rc"))"
    bench_why "$name" "$( ((bench_rc != 0)) && bench_status_text "$bench_rc" || echo "UCX error")"
    return 0
  fi
  grep -hE "UCX +WARN" "$work/$name.err" "$work/$name.csv" "$work/$name.server.log" >&2 || true
  # CSV: name(=size),iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr;
  # latencies in usec (RTT/2 for the latency tests), bandwidth in MB/s of 2^20 bytes.
  if ! python3 - "$work/$name.csv" "$work/$name.json" "$batch" "$test" <<'EOF'; then
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
    cat "$work/$name.err" "$work/$name.csv" >&2
    bench_fail "cannot parse ucx_perftest output ($name)"
    bench_why "$name" "unparsed output"
  fi
}

# bench_sockperf NAME FLAGS...: TCP ping-pong, 14 B (sockperf's minimum), for
# $bench_peer_seconds; JSON {"avg_us","p50_us","p99_us"} (RTT/2, as perftest's).
bench_sockperf() {
  local name=$1 port
  shift
  if ! command -v sockperf >/dev/null; then
    bench_why "$name" "no sockperf"
    return 0
  fi
  port=$(bench_free_port)
  echo "== sockperf ping-pong --tcp -m 14 -t $bench_peer_seconds $*"
  bench_start_server "$work/$name.server.log" sockperf server --tcp -i 127.0.0.1 -p "$port" "$@"
  if ! bench_wait_listening "$port"; then
    cat "$work/$name.server.log" >&2
    bench_fail "sockperf server did not listen on 127.0.0.1:$port"
    bench_why "$name" "server did not start"
    bench_stop "$bench_server"
    return 0
  fi
  bench_bounded "$work/$name.log" - sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m 14 -t "$bench_peer_seconds" "$@"
  bench_stop "$bench_server"
  grep -E "Summary|percentile (50|99)\.000|MIN" "$work/$name.log" || true
  if ((bench_rc != 0)); then
    cat "$work/$name.log" >&2
    bench_fail "sockperf ping-pong $* ($(bench_status_text "$bench_rc"))"
    bench_why "$name" "$(bench_status_text "$bench_rc")"
    return 0
  fi
  if ! python3 - "$work/$name.log" "$work/$name.json" <<'EOF'; then
import json, re, sys
text = open(sys.argv[1]).read()
def number(pattern):
    match = re.search(pattern, text)
    if not match:
        raise SystemExit(f"no match for {pattern!r}")
    return float(match.group(1))
row = {"avg_us": number(r"Summary: Latency is\s+([\d.]+)"),
       "p50_us": number(r"percentile 50\.000 =\s+([\d.]+)"),
       "p99_us": number(r"percentile 99\.000 =\s+([\d.]+)")}
open(sys.argv[2], "a").write(json.dumps(row) + "\n")
EOF
    bench_fail "cannot parse sockperf output ($name)"
    bench_why "$name" "unparsed output"
  fi
}

# bench_iperf3 NAME LENGTH: one stream for $bench_peer_seconds, LENGTH-byte
# writes (iperf3's -l: 1M, 64K); JSON {"bytes","bytes_per_second"} (received).
bench_iperf3() {
  local name=$1 length=$2 port
  if ! command -v iperf3 >/dev/null; then
    bench_why "$name" "no iperf3"
    return 0
  fi
  port=$(bench_free_port)
  echo "== iperf3 -c 127.0.0.1 -l $length -t $bench_peer_seconds (one stream)"
  bench_start_server "$work/$name.server.log" iperf3 -s -1 -p "$port"
  if ! bench_wait_listening "$port"; then
    cat "$work/$name.server.log" >&2
    bench_fail "iperf3 server did not listen on 127.0.0.1:$port"
    bench_why "$name" "server did not start"
    bench_stop "$bench_server"
    return 0
  fi
  bench_bounded "$work/$name.iperf3-output" "$work/$name.err" \
    iperf3 -c 127.0.0.1 -p "$port" -l "$length" -t "$bench_peer_seconds" -J
  bench_stop "$bench_server"
  if ((bench_rc != 0)); then
    cat "$work/$name.err" "$work/$name.iperf3-output" >&2
    bench_fail "iperf3 client ($(bench_status_text "$bench_rc"))"
    bench_why "$name" "$(bench_status_text "$bench_rc")"
    return 0
  fi
  if ! python3 - "$work/$name.iperf3-output" "$work/$name.json" "$(bench_bytes "$length")" <<'EOF'; then
import json, sys
end = json.load(open(sys.argv[1]))["end"]
received = end["sum_received"]["bits_per_second"] / 8
print(f" iperf3 -l {int(sys.argv[3])}: {received / 1e9:.3f} GB/s received")
open(sys.argv[2], "a").write(json.dumps({"bytes": int(sys.argv[3]), "bytes_per_second": received,
                                         "bw_gb_s": received / 1e9}) + "\n")
EOF
    bench_fail "cannot parse iperf3 output ($name)"
    bench_why "$name" "unparsed output"
  fi
}

# bench_update_doc DOC TABLE NAME HEADING: puts the file TABLE between
# `<!-- NAME:begin -->` and `<!-- NAME:end -->` in the markdown file DOC, or,
# where DOC has no such markers, appends a section HEADING (with INTRO, read
# from standard input) holding them.
bench_update_doc() {
  local intro
  intro=$(cat)
  python3 - "$@" "$intro" <<'PYEOF'
import sys
doc_path, table_path, name, heading, intro = sys.argv[1:]
intro = intro.strip()
begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
text = open(doc_path).read()
table = open(table_path).read()
if begin in text and end in text and text.index(begin) < text.index(end):
    head, rest = text.split(begin, 1)
    text = head + begin + "\n" + table + end + rest.split(end, 1)[1]
else:
    text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + (intro + "\n\n" if intro else "") + begin + "\n" + \
        table + end + "\n"
open(doc_path, "w").write(text)
PYEOF
}

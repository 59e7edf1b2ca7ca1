#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/run_tcp.sh <build dir>: rdmx's tcp provider against its peers, on
# loopback, in one table (`make bench` runs it):
#   rdmx     `rdmx perf p2p write_lat --provider tcp` 8 B (perftest ib_write_lat
#            style) and `write_bw` 64 KiB..16 MiB; rdmx starts its two ranks
#   sockperf ping-pong, TCP, busy-poll and blocking (14 B: sockperf's minimum)
#   iperf3   one TCP stream, 1 MiB writes
# Targets: bandwidth >= 0.95x iperf3; 8 B latency <= 1.1x sockperf busy-poll.
# A missed target is reported, not an error; the exit status is non-zero only
# when something failed to run. Every process is bounded by `timeout` and
# stopped on exit. The runners are in bench/common.sh.
#
# Knobs: RDMX_BENCH_ROUNDS (default 3: the whole sequence runs that many
# times and each figure is the best round, the same for rdmx and its peers,
# which keeps a busy machine from deciding the comparison),
# RDMX_BENCH_SECONDS (peer run length, default 5), RDMX_BENCH_LAT_ITERS
# (default 20000), RDMX_BENCH_BW_SIZES (default 64K..16M).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <build dir>" >&2
  exit 2
fi
build=$1
rdmx=$build/tools/rdmx
bench_peer_seconds=${RDMX_BENCH_SECONDS:-5}
lat_iters=${RDMX_BENCH_LAT_ITERS:-20000}
bw_sizes=${RDMX_BENCH_BW_SIZES:-64K..16M}
rounds=${RDMX_BENCH_ROUNDS:-3}
limit=$((bench_peer_seconds + 60))  # per process
# The peers run on 127.0.0.1; make rdmx's tcp provider use loopback too.
export RDMX_SOCKET_IFNAME=${RDMX_SOCKET_IFNAME:-lo}

for tool in "$rdmx" sockperf iperf3 python3 ss timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "run_tcp: $tool not found (make build; scripts/deps.sh --bench installs sockperf and iperf3)" >&2
    exit 2
  fi
done

bench_name=run_tcp
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_workdir rdmx-bench

echo "run_tcp: loopback on $(nproc) CPUs ($(uname -r)), $rounds round(s); scratch $work"
for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds"
  bench_rdmx_p2p "write_lat.r$round" write_lat --provider tcp --size 8 --iters "$lat_iters" --warmup 1000
  bench_rdmx_p2p "write_lat_background.r$round" write_lat --provider tcp --size 8 --iters "$lat_iters" --warmup 1000 --no-progress
  bench_sockperf "sockperf_busy.r$round" --nonblocked --timeout 0
  bench_sockperf "sockperf_blocking.r$round"
  # Bandwidth runs back to back, so both see the same machine.
  bench_rdmx_p2p "write_bw.r$round" write_bw --provider tcp --size "$bw_sizes"
  bench_iperf3 "iperf3.r$round" 1M
done

PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$bench_here python3 - "$work" "$rounds" <<'EOF' || bench_fail "cannot build the comparison table"
import sys
from results import best, best_row, size_label
work, rounds = sys.argv[1], int(sys.argv[2])

# The best round of each, judged on the figure compared: median latency, rate.
lat = best_row(work, "write_lat", "t_typical_us", True)
lat_background = best_row(work, "write_lat_background", "t_typical_us", True)
busy = best_row(work, "sockperf_busy", "p50_us", True)
blocking = best_row(work, "sockperf_blocking", "p50_us", True)
iperf = best_row(work, "iperf3", "bytes_per_second", False)
bw_by_size = best(work, "write_bw", "bw_avg_gb_s", False)
bw_rows = [bw_by_size[size] for size in sorted(bw_by_size)]
iperf_bw = iperf["bytes_per_second"] if iperf else None

def cell(value, digits=2):
    return f"{value:9.{digits}f}" if value is not None else f"{'n/a':>9}"

rule = "=" * 80
print()
print(rule)
print(f" rdmx (tcp provider) vs peers on loopback 127.0.0.1, best of {rounds} round(s)")
print(rule)
print(f" {'one-way latency (RTT/2), usec':48}{'median':>9}{'average':>9}{'p99':>9}")
for label, result, keys in [
    ("rdmx write_lat 8 B, progress() while spinning", lat, ("t_typical_us", "t_avg_us", "p99_us")),
    ("rdmx write_lat 8 B, background progress only", lat_background, ("t_typical_us", "t_avg_us", "p99_us")),
    ("sockperf ping-pong 14 B, busy-poll", busy, ("p50_us", "avg_us", "p99_us")),
    ("sockperf ping-pong 14 B, blocking", blocking, ("p50_us", "avg_us", "p99_us")),
]:
    print(f" {label:48}" + "".join(cell(result[key] if result else None) for key in keys))
print()
print(f" {'bandwidth':48}{'GB/s':>9}{'x iperf3':>9}")
print(f" {'iperf3, 1 stream, 1 MiB writes':48}{cell(iperf_bw / 1e9 if iperf_bw else None, 3)}")
for row in bw_rows:
    ratio = row["bw_avg_gb_s"] * 1e9 / iperf_bw if iperf_bw else None
    print(f" {'rdmx write_bw ' + size_label(row['bytes']):48}{cell(row['bw_avg_gb_s'], 3)}{cell(ratio)}")
print()
print(" targets (GB = 1e9 bytes; latency compared on the median, perftest's t_typical)")

def verdict(ratio, ok):
    return f"{ratio:5.2f}x  {'met' if ok else 'MISSED'}"

if lat and busy:
    ratio = lat["t_typical_us"] / busy["p50_us"]
    print(f"  8 B latency <= 1.10x sockperf busy-poll:  {lat['t_typical_us']:.2f} vs {busy['p50_us']:.2f} usec"
          f"  {verdict(ratio, ratio <= 1.10)}")
else:
    print("  8 B latency <= 1.10x sockperf busy-poll:  n/a (a run failed)")
if bw_rows and iperf_bw:
    one_mib = bw_by_size.get(1 << 20)
    top = max(bw_rows, key=lambda row: row["bw_avg_gb_s"])
    for label, row in [("at 1 MiB", one_mib), (f"best ({size_label(top['bytes'])})", top)]:
        if row:
            ratio = row["bw_avg_gb_s"] * 1e9 / iperf_bw
            print(f"  bandwidth >= 0.95x iperf3, {label:16} {row['bw_avg_gb_s']:.3f} vs {iperf_bw / 1e9:.3f} GB/s"
                  f"  {verdict(ratio, ratio >= 0.95)}")
else:
    print("  bandwidth >= 0.95x iperf3:  n/a (a run failed)")
print(rule)
EOF

if ((bench_errors > 0)); then
  echo "run_tcp: $bench_errors run(s) failed" >&2
  exit 1
fi

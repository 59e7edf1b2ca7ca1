#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/run_shm.sh <build dir>: rdmx's shm provider against its peers, two
# processes on this host, in one table (`make bench-shm` runs it):
#   rdmx      `rdmx perf p2p write_lat` (p50 one-way, as ib_write_lat) and
#             `write_bw`, --provider shm; rdmx starts its two ranks
#   UCX       ucx_perftest ucp_put_lat and ucp_put_bw over UCX_TLS=sm,self
#   Open MPI  bench/mpi_pingpong.c over btl self,vader (pml ob1): pingpong
#             (RTT/2) and stream (windows of MPI_Isend, osu_bw style)
# every size from 8 B to 64 MiB (powers of two), the same iterations per size
# for the three. Targets: 8 B one-way latency p50 <= 0.17 usec; 4 MiB
# bandwidth >= 16 GB/s. A missed target is reported, not an error; the exit
# status is non-zero only when something failed to run. Every process is
# bounded by `timeout` and stopped on exit. The runners are in bench/common.sh.
#
# Knobs: RDMX_BENCH_PROVIDER (default shm; tcp runs the script over the tcp
# provider), RDMX_BENCH_ROUNDS (default 3: the whole sequence runs that many
# times and each figure is the best round, the same for rdmx and its peers),
# RDMX_BENCH_SIZES (default 8..64M; a comma list such as 8,4K,4M also does;
# RDMX_BENCH_LAT_SIZES and RDMX_BENCH_BW_SIZES override it per test),
# RDMX_BENCH_LAT_ITERS (default 20000) and RDMX_BENCH_LAT_BYTES (default 256M:
# big sizes run fewer ping-pongs, so that about that much moves each way, 20 at
# least), RDMX_BENCH_BW_ITERS (default 100000) and RDMX_BENCH_BW_BYTES (default
# 1G: messages per size, likewise, 16 at least), RDMX_BENCH_TIMEOUT (seconds a
# process may run, default 120), RDMX_BENCH_PERF_ARGS (more `rdmx perf p2p`
# arguments, e.g. --heap), RDMX_BENCH_UCX_API (ucp, the default, honours
# UCX_TLS; uct runs put_lat/put_bw on one transport, RDMX_BENCH_UCX_TL, default
# posix), RDMX_BENCH_UCX_TLS (default sm,self). Open MPI takes OMPI_MCA_* from
# the environment as usual.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <build dir>" >&2
  exit 2
fi
build=$1
rdmx=$build/tools/rdmx
# Extra `rdmx perf p2p` arguments, e.g. --heap (registered heap memory instead
# of allocate_memory(): every message then goes through the target process).
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

for tool in "$rdmx" ucx_perftest mpicc mpirun python3 ss timeout; do
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

bench_name=run_shm
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_workdir rdmx-bench-shm

lat_plan=$(bench_plan "$lat_sizes" "$lat_iters" "$lat_bytes" 20) || exit 2
bw_plan=$(bench_plan "$bw_sizes" "$bw_iters" "$bw_bytes" 16) || exit 2
lat_bytes_n=$(bench_bytes "$lat_bytes")
bw_bytes_n=$(bench_bytes "$bw_bytes")

echo "run_shm: provider $provider, $(nproc) CPUs ($(uname -r)), $rounds round(s); scratch $work"
echo "run_shm: UCX $(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p'), $(mpirun --version 2>/dev/null | head -1)"
bench_build_mpi_pingpong

for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds"
  while read -r n warmup group; do
    bench_rdmx_p2p "rdmx_lat.r$round" write_lat --provider "$provider" "${perf_args[@]}" \
      --size "$group" --iters "$n" --warmup "$warmup"
  done <<<"$lat_plan"
  bench_ucx "ucx_lat.r$round" "$ucx_lat_test" "$lat_plan"
  bench_mpi_p2p "mpi_lat.r$round" vader pingpong --size "$lat_sizes" --iters "$lat_iters" --bytes "$lat_bytes_n"
  # Bandwidth runs back to back, so the three see the same machine.
  while read -r n warmup group; do
    bench_rdmx_p2p "rdmx_bw.r$round" write_bw --provider "$provider" "${perf_args[@]}" \
      --size "$group" --iters "$n" --warmup "$warmup"
  done <<<"$bw_plan"
  bench_ucx "ucx_bw.r$round" "$ucx_bw_test" "$bw_plan"
  bench_mpi_p2p "mpi_bw.r$round" vader stream --size "$bw_sizes" --iters "$bw_iters" --bytes "$bw_bytes_n"
done

ucx_label="UCX $ucx_lat_test/$ucx_bw_test, UCX_TLS=$ucx_tls"
[[ $ucx_api == uct ]] && ucx_label="UCX (UCT) $ucx_lat_test/$ucx_bw_test -x $ucx_tl"
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$bench_here python3 - "$work" "$rounds" "$provider" "$ucx_label" <<'EOF' || bench_fail "cannot build the comparison table"
import os, sys
from results import best, size_label
work, rounds, provider, ucx_label = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

rdmx_lat = best(work, "rdmx_lat", "t_typical_us", True)
ucx_lat = best(work, "ucx_lat", "p50_us", True)
mpi_lat = best(work, "mpi_lat", "p50_us", True)
rdmx_bw = best(work, "rdmx_bw", "bw_avg_gb_s", False)
ucx_bw = best(work, "ucx_bw", "bw_gb_s", False)
mpi_bw = best(work, "mpi_bw", "bw_gb_s", False)

def cell(table, size, key, digits, width=10):
    """Fewer decimals for big figures, so that every column keeps its width."""
    row = table.get(size)
    if not row:
        return f"{'n/a':>{width}}"
    value = row[key]
    digits = min(digits, 1 if value >= 1000 else 2 if value >= 100 else digits)
    return f"{value:{width}.{digits}f}"

sizes = sorted(set(rdmx_lat) | set(ucx_lat) | set(mpi_lat) | set(rdmx_bw) | set(ucx_bw) | set(mpi_bw))
rule = "=" * 96
print()
print(rule)
print(f" rdmx ({provider} provider) vs peers, 2 processes on this host, best of {rounds} round(s)")
print(f" rdmx: rdmx perf p2p write_lat / write_bw {os.environ.get('RDMX_BENCH_PERF_ARGS', '')}; {ucx_label};")
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

if ((bench_errors > 0)); then
  echo "run_shm: $bench_errors run(s) failed" >&2
  exit 1
fi

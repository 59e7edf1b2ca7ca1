#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# rdmx on the verbs provider beside perftest, on the same soft-RoCE device in
# one guest run (scripts/rxe-vm.sh): RDMA WRITE bandwidth at 64 KiB
# (ib_write_bw) and latency at 2 B (ib_write_lat). Rounds alternate between
# the two programs and the median of each is kept, because an emulated guest
# is noisy. Prints a table and, with --update-doc, writes it into
# docs/PERFORMANCE.md between <!-- verbs:begin --> and <!-- verbs:end -->.
#   bash bench/run_verbs.sh BUILD_DIR [--update-doc]      (make bench-verbs)
# Then what registering a buffer costs on rxe0 against a RegistrationCache
# hit (bench/registration_bench), and the hit's cost natively on the host.
# Emulation speeds say nothing about hardware: only the ratios mean something.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: run_verbs.sh BUILD_DIR [--update-doc]}" && pwd)
mode=${2:-}

if [[ "$mode" != "--in-guest" ]]; then
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  bash "$repo/scripts/rxe-vm.sh" bash "$here/run_verbs.sh" "$build" --in-guest | tee "$out"
  rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { echo "run_verbs: the guest run failed (exit $rc)" >&2; exit "$rc"; }
  # The watched hit natively (no NIC here: the tcp device, treated as pinning).
  native=$(RDMX_PROVIDER=tcp "$build/bench/registration_bench" --benchmark_filter='CacheHit/1048576/1$' \
             --benchmark_format=json 2>/dev/null |
           python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["benchmarks"][0]["real_time"] * 1000))')
  echo "native watched hit: ${native} ns"
  sed -i "s|@NATIVE_HIT_NS@|${native:-n/a}|" "$out"
  if [[ "$mode" == "--update-doc" ]]; then
    python3 - "$repo/docs/PERFORMANCE.md" "$out" <<'PY'
import re, sys
doc, out = sys.argv[1], sys.argv[2]
table = open(out).read().split("<!-- table -->\n", 1)[1].split("<!-- /table -->", 1)[0]
text = open(doc).read()
block = "<!-- verbs:begin -->\n" + table + "<!-- verbs:end -->"
text = re.sub(r"<!-- verbs:begin -->.*?<!-- verbs:end -->", lambda m: block, text, flags=re.S)
open(doc, "w").write(text)
print("run_verbs: table written into", doc)
PY
  fi
  exit 0
fi

# ---- inside the guest ----
rounds=${RDMX_VERBS_ROUNDS:-3}
iters_bw=${RDMX_VERBS_BW_ITERS:-3000}
iters_lat=${RDMX_VERBS_LAT_ITERS:-3000}
gid=1  # rxe0's RoCE v2 IPv4 GID (::ffff:10.77.0.1), the one rdmx picks itself
server=10.77.0.1
rdmx="$build/tools/rdmx"
work=$(mktemp -d)
export RDMX_TIMEOUT=60

perftest_pair() {  # NAME ARGS...: server in the background, client against it; client output on stdout
  local name=$1
  shift
  timeout 120 "$name" -d rxe0 -x "$gid" -F "$@" >"$work/server.out" 2>&1 &
  local spid=$!
  local out=""
  for _ in $(seq 50); do
    sleep 0.2
    out=$(timeout 120 "$name" -d rxe0 -x "$gid" -F "$@" "$server" 2>&1) && break
  done
  wait "$spid"
  echo "$out"
}

bw_perftest() { perftest_pair ib_write_bw -s 65536 -n "$iters_bw" | awk '$1 == 65536 {print $4}'; }
lat_perftest() { perftest_pair ib_write_lat -s 2 -n "$iters_lat" | awk '$1 == 2 {print $5}'; }
bw_rdmx() {
  "$rdmx" perf p2p write_bw -s 64K -n "$iters_bw" --provider verbs --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["results"][0]["bw_avg_mib_s"])'
}
lat_rdmx() {
  "$rdmx" perf p2p write_lat -s 2 -n "$iters_lat" --provider verbs --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["results"][0]["t_typical_us"])'
}

declare -A got
for r in $(seq "$rounds"); do
  for what in bw_perftest bw_rdmx lat_perftest lat_rdmx; do
    v=$($what)
    echo "round $r: $what = ${v:-failed}"
    got[$what]+="${v:-nan} "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "nan")}'; }
bwp=$(echo "${got[bw_perftest]}" | median)
bwr=$(echo "${got[bw_rdmx]}" | median)
lp=$(echo "${got[lat_perftest]}" | median)
lr=$(echo "${got[lat_rdmx]}" | median)
kernel=$(uname -r)
echo "<!-- table -->"
python3 - "$bwp" "$bwr" "$lp" "$lr" "$rounds" "$iters_bw" "$iters_lat" "$kernel" <<'PY'
import sys
bwp, bwr, lp, lr = (float(x) for x in sys.argv[1:5])
rounds, ib, il, kernel = sys.argv[5:9]
print("| test (soft-RoCE rxe0, RoCE v2, one guest) | perftest | rdmx verbs | rdmx / perftest | target |")
print("|---|---|---|---|---|")
print(f"| RDMA WRITE bandwidth, 64 KiB (MB/s, MB = 2^20) | {bwp:.1f} | {bwr:.1f} | {bwr / bwp:.2f}x | >= 0.95x |")
print(f"| RDMA WRITE latency, 2 B, typical (us, RTT/2) | {lp:.2f} | {lr:.2f} | {lr / lp:.2f}x | <= 1.10x |")
print()
print(f"Medians of {rounds} alternating rounds; {ib} iterations per bandwidth run, {il} per latency run; "
      f"perftest `ib_write_bw -d rxe0 -x 1 -F -s 65536` and `ib_write_lat -d rxe0 -x 1 -F -s 2`, "
      f"rdmx `rdmx perf p2p write_bw -s 64K` and `write_lat -s 2` with `--provider verbs`; "
      f"guest kernel {kernel}, qemu TCG.")
PY
echo
# Registration: ibv_reg_mr + ibv_dereg_mr against a RegistrationCache hit.
"$build/bench/registration_bench" --benchmark_format=json \
  --benchmark_filter='RegisterAndDeregister|CacheHit/[0-9]+/0$' >"$work/reg.json" 2>/dev/null
RDMX_REGISTRATION_CACHE=0 "$build/bench/registration_bench" --benchmark_format=json \
  --benchmark_filter='CacheHit/[0-9]+/0$' >"$work/reg_off.json" 2>/dev/null
python3 - "$work/reg.json" "$work/reg_off.json" <<'PY'
import json, sys
def times(path, prefix):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        name = b["name"]
        if name.startswith(prefix):
            out[int(name.split("/")[1])] = b["real_time"]  # microseconds
    return out
reg = times(sys.argv[1], "RegisterAndDeregister/")
hit = times(sys.argv[1], "CacheHit/")
off = times(sys.argv[2], "CacheHit/")
print("| buffer (rxe0) | register + deregister (us) | RegistrationCache hit (us) | hit, RDMX_REGISTRATION_CACHE=0 (us) | register / hit |")
print("|---|---|---|---|---|")
for size in sorted(reg):
    name = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"| {name} | {reg[size]:.1f} | {hit[size]:.2f} | {off[size]:.1f} | {reg[size] / hit[size]:.0f}x |")
print()
print("`RDMX_PROVIDER=verbs bench/registration_bench` (Google Benchmark) in the same guest. A hit natively, "
      "on the host's CPU (watched path, `CacheHit/1048576/1` on tcp): @NATIVE_HIT_NS@ ns.")
PY
echo "<!-- /table -->"
rm -rf "$work"

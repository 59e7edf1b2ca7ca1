#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The multi-host bed (scripts/bed.sh) as a cluster would be: two hosts of
# two ranks each, two NICs per host (one rail each), links shaped to 1
# Gbit/s. Collectives give right results (the perf tool checks every
# element); ranks of one host pick shm and ranks of different hosts tcp (the
# host's private socket directory); each local rank takes its own NIC and the
# bytes between hosts pass both shaped links; the bed is gone afterwards.
#   tests/bed/bed_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/bed_prelude.sh" "$1"
name="c$(($$ % 100000))"
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-bed.XXXXXX")
trap '"$bed" down "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export RDMX_TIMEOUT=${RDMX_TIMEOUT:-60}

fail() {
  echo "bed test: $*" >&2
  echo "--- output of the run:" >&2
  cat "$work/run.log" >&2 || true
  exit 1
}

"$bed" up "$name" 2 1gbit 2
"$bed" show "$name"
port=$((20000 + $$ % 10000))
RDMX_DEBUG=INFO "$bed" run "$name" 2x2 --time-limit 240 --port "$port" -- \
  "$build/tools/rdmx" perf coll all_reduce,all_gather,broadcast,reduce_scatter --sizes 4,64K,1M -n 5 \
  >"$work/run.log" 2>&1 || fail "the 2x2 run failed (exit $?)"

grep -q "Out of bounds values : 0 OK" "$work/run.log" || fail "rank 0 did not report every result right"
if grep -E "^\[0\] +[0-9]+ " "$work/run.log" | awk '($10 != 0 && $10 != "n/a") || $14 != 0 {bad = 1} END {exit !bad}'; then
  fail "a row reports wrong elements"
fi
# Ranks 0 and 1 share host 0; ranks 2 and 3 host 1.
grep -qE "^\[0\] .*rank 1 via shm" "$work/run.log" || fail "rank 0 did not reach rank 1 (same host) over shm"
grep -qE "^\[0\] .*rank 2 via tcp" "$work/run.log" || fail "rank 0 did not reach rank 2 (other host) over tcp"
if grep -qE "^\[0\] .*rank 2 via shm" "$work/run.log"; then fail "rank 0 reached rank 2 (other host) over shm"; fi
sent=$(tc -s -n "rdmxb-$name-h0" qdisc show dev "rb${name}h0" | awk '/Sent/ {print $2; exit}')
((sent > 3000000)) || fail "only ${sent:-0} bytes left host 0 through its shaped link (NIC 0)"
sent1=$(tc -s -n "rdmxb-$name-h0" qdisc show dev "rb${name}h0n1" | awk '/Sent/ {print $2; exit}')
((sent1 > 3000000)) || fail "only ${sent1:-0} bytes left host 0 through its NIC 1: local rank 1 did not take it"
grep -q "^\[2\] bed-$name-h1:" "$work/run.log" || fail "rank 2 does not run on host 1 (its hostname)"
echo "bed test: 2x2 over 1 Gbit/s links: results right, shm within hosts, tcp between ($sent and $sent1 bytes left host 0 by its two NICs)"

# The hierarchical algorithms of every operation, forced, on 2x2 and 2x4
# (four ranks per host: every local rank carries a share across the link).
for layout in 2x2 2x4; do
  RDMX_ALGO=hier RDMX_DEBUG=INFO "$bed" run "$name" "$layout" --time-limit 240 --port "$((port + 1))" -- \
    "$build/tools/rdmx" perf coll all_reduce,all_gather,reduce_scatter,broadcast,reduce --sizes 4,64K,1M -n 3 \
    >"$work/run.log" 2>&1 || fail "the $layout run of the hierarchical algorithms failed (exit $?)"
  grep -q "Out of bounds values : 0 OK" "$work/run.log" || fail "$layout hier: rank 0 did not report every result right"
  hosts="2 hosts x ${layout#2x} ranks"
  grep -q "topology $hosts" "$work/run.log" || fail "$layout hier: the communicator did not see $hosts"
done
"$bed" run "$name" 2x2 --time-limit 60 --port "$((port + 2))" -- "$build/tools/rdmx" info --communicator \
  >"$work/run.log" 2>&1 || fail "rdmx info --communicator failed on the bed"
grep -q "hosts: 2 hosts x 2 ranks" "$work/run.log" || fail "rdmx info --communicator did not show 2 hosts x 2 ranks"
grep -qE "all_reduce +1 MiB +hier: lowest predicted" "$work/run.log" || fail "rdmx info: 1 MiB all_reduce does not take hier"
grep -qE "devices: .* 1 auto\[[^]]*tcp:rb${name}h0n1/" "$work/run.log" || fail "rdmx info: rank 1 does not use host 0's NIC 1"
grep -qE "devices: .* 2 auto\[[^]]*tcp:rb${name}h1/" "$work/run.log" || fail "rdmx info: rank 2 does not use host 1's NIC 0"
echo "bed test: hier forced on 2x2 and 2x4: results right; rdmx info shows the layout"

"$bed" down "$name"
if ip netns list | grep -q "^rdmxb-$name-"; then fail "bed $name still has namespaces after down"; fi

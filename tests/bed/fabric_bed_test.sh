#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Seeing a fabric with one slow link on the multi-host bed (scripts/bed.sh):
# - three hosts at 1 Gbit/s, host 2's link at 100 Mbit/s: `rdmx perf
#   fabric` calls slow exactly the links through host 2, and names rank 2
#   (its NIC) as the one they all go through;
# - two hosts of two ranks with two NICs each, NIC 1 of host 1 at 100
#   Mbit/s: `rdmx status`, run on host 1 against a running job's store on
#   host 0, shows its four ranks on two hosts and is refused without the
#   job's secret; `perf fabric` keeps the rail-0 links between NIC 0s fast,
#   calls slow only links through a NIC on rail 1, and names as suspects
#   the two ends of rail 1 (ranks 1 and 3), from the links within a rail.
#   tests/bed/fabric_bed_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/bed_prelude.sh" "$1"
name="f$(($$ % 10000))"
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-fabric-bed.XXXXXX")
job=
trap '[[ -z "$job" ]] || kill "$job" 2>/dev/null || true; "$bed" down "$name" >/dev/null 2>&1 || true;
      "$bed" down "${name}r" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export RDMX_TIMEOUT=${RDMX_TIMEOUT:-60}
port=$((20000 + $$ % 10000))

fail() { fail_with_logs "fabric bed test" "$*"; }

"$bed" up "$name" 3 1gbit >/dev/null
"$bed" link "$name" 2 100mbit
"$bed" run "$name" 3x1 --time-limit 120 --port "$port" -- "$rdmx" perf fabric --json --seconds 0.3 \
  >"$work/three.log" 2>&1 || fail "perf fabric on three hosts failed (exit $?)"
rank0 "$work/three.log" >"$work/three.json"
python3 - "$work/three.json" <<'PY' || fail "perf fabric did not single out host 2's link"
import json, sys
doc = json.load(open(sys.argv[1]))
pairs = [l for l in doc["links"] if l["pattern"] == "pairs"]
assert len(pairs) == 6, pairs
for l in pairs:
    assert l["outlier"] == (2 in (l["from"], l["to"])), l
assert [s["rank"] for s in doc["suspects"]] == [2], doc["suspects"]
assert doc["suspects"][0]["interface"].endswith("h2"), doc["suspects"][0]
print("three hosts:", "; ".join(doc["outliers"]), "| suspect:", doc["suspects"][0]["why"])
PY
"$bed" down "$name" >/dev/null

two="${name}r"
"$bed" up "$two" 2 1gbit 2 >/dev/null
"$bed" link "$two" 1 100mbit 1
export RDMX_AUTH_KEY=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
RDMX_STATUS_INTERVAL=200ms "$bed" run "$two" 2x2 --time-limit 120 --port "$port" -- \
  "$rdmx" perf coll all_reduce --sizes 1M -n 60 -w 1 >"$work/job.log" 2>&1 &
job=$!
seen=
for _ in $(seq 1 100); do
  if "$bed" exec "$two" 1 "$rdmx" status --store "10.203.0.1:$port" --timeout 2 >"$work/status.log" 2>&1 &&
    grep -q "4 ranks on 2 host(s)" "$work/status.log" && ! grep -q "no record from" "$work/status.log"; then
    seen=1
    break
  fi
  kill -0 "$job" 2>/dev/null || break
  sleep 0.2
done
# Each rank writes its first record one RDMX_STATUS_INTERVAL after it made
# its communicator: until then status rightly says "no record from" it.
[[ -n "$seen" ]] || fail "rdmx status on host 1 never showed the 2x2 job with all four ranks' records"
grep -q "rb${two}h1n1" "$work/status.log" || fail "rdmx status does not show rank 3's NIC rb${two}h1n1"
if RDMX_AUTH_KEY= "$bed" exec "$two" 1 env -u RDMX_AUTH_KEY "$rdmx" status --store "10.203.0.1:$port" --timeout 2 \
  >"$work/refused.log" 2>&1; then
  fail "rdmx status without the job's secret was served"
fi
grep -q "export the job's RDMX_AUTH_KEY" "$work/refused.log" || fail "the refusal does not say what to set"
wait "$job" || fail "the 2x2 job failed (exit $?)"
job=
"$bed" run "$two" 2x2 --time-limit 120 --port "$port" -- "$rdmx" perf fabric --json --seconds 0.3 \
  >"$work/rails.log" 2>&1 || fail "perf fabric on the 2x2 bed failed (exit $?)"
rank0 "$work/rails.log" >"$work/rails.json"
python3 - "$work/rails.json" "$two" <<'PY' || fail "perf fabric on the 2x2 bed misplaced the slow link"
import json, sys
doc, bed = json.load(open(sys.argv[1])), sys.argv[2]
rail1 = {f"rb{bed}h0n1", f"rb{bed}h1n1"}
pairs = [l for l in doc["links"] if l["pattern"] == "pairs"]
assert len(pairs) == 8, pairs
slow = [l for l in pairs if l["outlier"]]
assert slow, "no slow link"
for l in slow:
    assert {l["interface"], l["to_interface"]} & rail1, l
for l in pairs:
    if {l["from"], l["to"]} == {0, 2}:
        assert not l["outlier"], l
    if {l["from"], l["to"]} == {1, 3}:
        assert l["outlier"] and not l["across_networks"], l
    assert l["across_networks"] == (l["from"] % 2 != l["to"] % 2), l
# Within rail 1, the only slow cable joins ranks 1 and 3: both ends named, and
# never a rank on rail 0, whatever rail the pairs across rails rode.
assert sorted(s["rank"] for s in doc["suspects"]) == [1, 3], doc["suspects"]
print("2x2:", "; ".join(doc["outliers"]), "| suspects:", "; ".join(s["why"] for s in doc["suspects"]))
PY
echo "fabric bed test: the slow link named on three hosts and on two hosts' rail 1; rdmx status read the 2x2 job from host 1"
head -8 "$work/status.log"

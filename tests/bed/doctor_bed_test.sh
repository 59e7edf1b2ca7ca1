#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# rdmx doctor, and how ranks choose their interface, on the multi-host bed
# (scripts/bed.sh), two hosts of two ranks:
# - host 1 has a stray interface listed before its NIC (bed.sh stray), on a
#   network without peers, and its NIC at MTU 1400 against host 0's 1500.
#   With RDMX_SOCKET_IFNAME unset, doctor says the stray interface reaches
#   no host and that ranks skip it (a note), warns of the MTU mismatch, and
#   exits 0; a job's ranks start on the NIC the route to the store leaves
#   by and say which interface they skipped and why.
# - RDMX_SOCKET_IFNAME naming the stray interface: a problem (exit 1) whose
#   fix names the NIC that reaches every host.
# - a firewall on host 0 that opens only the store's port and 41000-41099:
#   doctor finds the refused ports and points to RDMX_PORT_RANGE; with
#   RDMX_PORT_RANGE=41000-41099 it finds no problem, and a job runs through
#   that firewall.
#   tests/bed/doctor_bed_test.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/bed_prelude.sh" "$1"
if ! command -v nft >/dev/null; then
  echo "SKIP: the firewall case needs nft (Debian package nftables; scripts/deps.sh test installs it)"
  exit 77
fi
name="d$(($$ % 10000))"
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-doctor-bed.XXXXXX")
trap '"$bed" down "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export RDMX_TIMEOUT=${RDMX_TIMEOUT:-60}
unset RDMX_SOCKET_IFNAME RDMX_PORT_RANGE
port=$((20000 + $$ % 10000))

fail() { fail_with_logs "doctor bed test" "$*"; }

doctor() {  # LOG [bed run options..]: rdmx doctor as a 2x2 job; its exit status
  local log=$1
  shift
  local status=0
  "$bed" run "$name" 2x2 --ifname auto --time-limit 60 --port "$port" "$@" -- \
    "$rdmx" doctor --probe-timeout 1 >"$work/$log" 2>&1 || status=$?
  echo "$status"
}

"$bed" up "$name" 2 1gbit >/dev/null
"$bed" stray "$name" 1 >/dev/null
ip -n "rdmxb-$name-h1" link set "rb${name}h1" mtu 1400

status=$(doctor auto.log)
[[ $status == 0 ]] || fail "doctor with a stray interface (which ranks skip) exited $status, not 0"
rank0 "$work/auto.log" >"$work/auto.txt"
grep -q "ranks listen on rb${name}h1 10.203.0.2: the route to the job's store 10.203.0.1:$port leaves by it" \
  "$work/auto.txt" || fail "doctor does not say that host 1's ranks listen on its NIC, by the route to the store"
grep -q "skipped rb${name}h1x (10.204.0.2)" "$work/auto.txt" || fail "doctor does not say host 1 skips its stray interface"
grep -q "\[note\] interface: bed-$name-h1: rb${name}h1x (10.204.0.2) reaches no other host of the job" \
  "$work/auto.txt" || fail "doctor does not name the stray interface as reaching no host"
grep -q "\[warning\] mtu: .*MTU 1500 on bed-$name-h0 rb${name}h0 but 1400 on bed-$name-h1 rb${name}h1\|\[warning\] mtu: .*MTU 1400 on bed-$name-h1 rb${name}h1 but 1500 on bed-$name-h0 rb${name}h0" \
  "$work/auto.txt" || fail "doctor does not warn of the MTU mismatch"
grep -q "host bed-$name-h1 (ranks 2 3)" "$work/auto.txt" || fail "doctor does not speak for host 1's two ranks once"
sed -n '/^Findings/,$p' "$work/auto.txt"

RDMX_DEBUG=INFO "$bed" run "$name" 2x2 --ifname auto --time-limit 120 --port "$port" -- \
  "$rdmx" perf coll all_reduce --sizes 64K -n 20 -w 2 >"$work/job.log" 2>&1 ||
  fail "a job with RDMX_SOCKET_IFNAME unset failed on the bed with a stray interface"
grep -q "^\[2\] .*tcp: using interface rb${name}h1: the route to the job's store.*skipped rb${name}h1x (10.204.0.2): the route to the store 10.203.0.1:$port leaves by rb${name}h1, not by rb${name}h1x" \
  "$work/job.log" || fail "rank 2 does not say which interface it skipped and why"
grep -q "Out of bounds values : 0 OK" "$work/job.log" || fail "the job's results were wrong"

status=$(RDMX_SOCKET_IFNAME="=rb${name}h0,rb${name}h1x" doctor forced.log)
[[ $status == 1 ]] || fail "doctor with ranks forced onto the stray interface exited $status, not 1"
grep -q "\[problem\] interface: bed-$name-h1: ranks listen on rb${name}h1x (10.204.0.2) reaches no other host" \
  "$work/forced.log" || fail "doctor does not call the forced stray interface a problem"
grep -q "fix: RDMX_SOCKET_IFNAME==rb${name}h0,rb${name}h1x picks it: on this host set it to =rb${name}h1 " \
  "$work/forced.log" || fail "doctor's fix does not name the NIC that reaches every host"

# Host 0's firewall: loopback, answers, the store and 41000-41099 only.
ip netns exec "rdmxb-$name-h0" nft -f - <<NFT
table inet rdmxbed {
  chain input {
    type filter hook input priority 0; policy accept;
    iif lo accept
    ct state established,related accept
    tcp dport { $port, 41000-41099 } accept
    meta l4proto tcp reject with tcp reset
  }
}
NFT
status=$(doctor firewall.log)
[[ $status == 1 ]] || fail "doctor behind a firewall, without RDMX_PORT_RANGE, exited $status, not 1"
grep -q "\[problem\] ports: bed-$name-h0: connections to 10.203.0.1 port [0-9]* are refused although rdmx doctor listens there" \
  "$work/firewall.log" || fail "doctor does not find the refused ports"
grep -q "fix: set RDMX_PORT_RANGE=FIRST-LAST on every rank and open that range" "$work/firewall.log" ||
  fail "doctor does not point to RDMX_PORT_RANGE"
status=$(RDMX_PORT_RANGE=41000-41099 doctor ranged.log)
[[ $status == 0 ]] || fail "doctor with RDMX_PORT_RANGE inside the firewall's opening exited $status, not 0"
grep -q "No problems found." "$work/ranged.log" || fail "doctor found problems with the port range open"
RDMX_PORT_RANGE=41000-41099 "$bed" run "$name" 2x2 --ifname auto --time-limit 120 --port "$port" -- \
  "$rdmx" perf coll all_reduce --sizes 64K -n 20 -w 2 >"$work/fenced.log" 2>&1 ||
  fail "a job with RDMX_PORT_RANGE failed behind host 0's firewall"
grep -q "Out of bounds values : 0 OK" "$work/fenced.log" || fail "the job behind the firewall had wrong results"
echo "doctor bed test: stray interface skipped, forced one refused, MTU warned, firewall found and passed with RDMX_PORT_RANGE"

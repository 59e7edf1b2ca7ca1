#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/scale/run.sh BUILD_DIR [--np "8 16 32"] [--sizes 4,64M] [--out FILE]
#                    [--bed HOSTS [--rate RATE]]
# (`make bench-scale`): one communicator at each rank count, local ranks on
# this host, through `rdmx perf scale --json`; then bench/scale/model.py
# prints the table, fits how creation time and memory grow with the ranks,
# extrapolates to 16,384 ranks and checks the targets of docs/PERFORMANCE.md
# ("Communicators at scale").
#
# With --bed HOSTS the ranks run on HOSTS hosts of the multi-host bed
# (scripts/bed.sh, network namespaces joined by veth links; root): N/HOSTS
# ranks in each, shm within a host and tcp between them, the links unshaped
# unless --rate sets one (as tc writes it, 10gbit). N must divide by HOSTS.
#
# A rank count the host's memory cannot hold is refused by rdmx perf scale
# itself (rdmx::comm_memory), recorded with its reason, and the sweep goes on.
# Each run is bounded (RDMX_SCALE_LIMIT seconds, default 600). The JSON
# documents are kept in --out (default rdmx-scale.jsonl in the working
# directory) for the model to read again.
set -uo pipefail

build=${1:?usage: bench/scale/run.sh BUILD_DIR [--np LIST] [--sizes LIST] [--out FILE] [--bed HOSTS [--rate RATE]]}
shift
nps=${RDMX_SCALE_NP:-"8 16 32"}
sizes=4,64M
out=rdmx-scale.jsonl
hosts=0
rate=-
while [[ $# -gt 0 ]]; do
  case $1 in
    --np) nps=${2:?--np needs a list}; shift ;;
    --sizes) sizes=${2:?--sizes needs a list}; shift ;;
    --out) out=${2:?--out needs a file}; shift ;;
    --bed) hosts=${2:?--bed needs a number of hosts}; shift ;;
    --rate) rate=${2:?--rate needs a rate}; shift ;;
    *) echo "bench/scale/run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
rdmx=$build/tools/rdmx
[[ -x $rdmx ]] || { echo "bench/scale/run.sh: no $rdmx (build first)" >&2; exit 2; }
limit=${RDMX_SCALE_LIMIT:-600}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=$(command -v python3)

bed=
if ((hosts > 0)); then
  [[ $hosts =~ ^[0-9]+$ ]] || { echo "bench/scale/run.sh: --bed needs a number of hosts" >&2; exit 2; }
  bed=sc$(($$ % 10000))
  trap 'bash "$here/../../scripts/bed.sh" down "$bed" >/dev/null 2>&1 || true' EXIT
  echo "== bed $bed: $hosts hosts, links ${rate/#-/unshaped} (scripts/bed.sh up $bed $hosts $rate)"
  bash "$here/../../scripts/bed.sh" up "$bed" "$hosts" "$rate" >/dev/null || exit 2
fi

# One rank count: its JSON document on stdout, the ranks' errors in $2.
scale_run() {
  local np=$1 err=$2
  if [[ -z $bed ]]; then
    echo "== $np ranks: $rdmx perf scale --np $np --sizes $sizes --json (at most $limit s)" >&2
    timeout --kill-after=10 "$limit" "$rdmx" perf scale --np "$np" --sizes "$sizes" --json 2>"$err"
    return
  fi
  if ((np % hosts != 0)); then
    echo "$np ranks do not divide among $hosts hosts" >"$err"
    return 2
  fi
  local per=$((np / hosts)) log rc
  echo "== $np ranks, $per on each of $hosts bed hosts: scripts/bed.sh run $bed ${hosts}x$per --" \
    "rdmx perf scale --sizes $sizes --json (at most $limit s)" >&2
  log=$(mktemp)
  bash "$here/../../scripts/bed.sh" run "$bed" "${hosts}x$per" --time-limit "$limit" -- \
    "$rdmx" perf scale --sizes "$sizes" --json >"$log" 2>&1
  rc=$?
  # Rank 0 prints the document; every line carries its rank's prefix.
  sed -n 's/^\[0\] //p' "$log" | sed -n '/^{/,/^}/p'
  awk '/^\[0\] \{/ { json = 1 } !json { sub(/^\[[0-9]+\] /, ""); print } /^\[0\] \}/ { json = 0 }' "$log" >"$err"
  rm -f "$log"
  return "$rc"
}

: >"$out"
failed=0
for np in $nps; do
  err=$(mktemp)
  doc=$(scale_run "$np" "$err")
  rc=$?
  # One line per document; a document that does not parse counts as a failure.
  if [[ $rc == 0 ]] && line=$("$py" -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])))' "$doc" 2>/dev/null)
  then
    echo "$line" >>"$out"
  else
    why=$(grep -v '^\[' "$err" | grep -m1 -E 'rdmx|error' || tail -1 "$err")
    [[ $rc == 124 || $rc == 137 ]] && why="stopped after $limit s (RDMX_SCALE_LIMIT)"
    echo "   $np ranks failed (exit $rc): $why"
    "$py" -c 'import json, sys; print(json.dumps({"np": int(sys.argv[1]), "failed": sys.argv[2]}))' "$np" \
      "exit $rc: ${why:0:300}" >>"$out"
    failed=$((failed + 1))
  fi
  rm -f "$err"
done
"$py" "$here/model.py" "$out" --cores "$(nproc)"
exit $((failed > 0))

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/scale/run.sh BUILD_DIR [--np "8 16 32"] [--sizes 4,64M] [--out FILE]
# (`make bench-scale`): one communicator at each rank count, local ranks on
# this host, through `rdmx perf scale --json`; then bench/scale/model.py
# prints the table, fits how creation time and memory grow with the ranks,
# extrapolates to 16,384 ranks and checks the targets of docs/PERFORMANCE.md
# ("Communicators at scale").
#
# A rank count the host's memory cannot hold is refused by rdmx perf scale
# itself (rdmx::comm_memory), recorded with its reason, and the sweep goes on.
# Each run is bounded (RDMX_SCALE_LIMIT seconds, default 600). The JSON
# documents are kept in --out (default rdmx-scale.jsonl in the working
# directory) for the model to read again.
set -uo pipefail

build=${1:?usage: bench/scale/run.sh BUILD_DIR [--np LIST] [--sizes LIST] [--out FILE]}
shift
nps=${RDMX_SCALE_NP:-"8 16 32"}
sizes=4,64M
out=rdmx-scale.jsonl
while [[ $# -gt 0 ]]; do
  case $1 in
    --np) nps=${2:?--np needs a list}; shift ;;
    --sizes) sizes=${2:?--sizes needs a list}; shift ;;
    --out) out=${2:?--out needs a file}; shift ;;
    *) echo "bench/scale/run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
rdmx=$build/tools/rdmx
[[ -x $rdmx ]] || { echo "bench/scale/run.sh: no $rdmx (build first)" >&2; exit 2; }
limit=${RDMX_SCALE_LIMIT:-600}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=$(command -v python3)

: >"$out"
failed=0
for np in $nps; do
  echo "== $np ranks: $rdmx perf scale --np $np --sizes $sizes --json (at most $limit s)"
  err=$(mktemp)
  doc=$(timeout --kill-after=10 "$limit" "$rdmx" perf scale --np "$np" --sizes "$sizes" --json 2>"$err")
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

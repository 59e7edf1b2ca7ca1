#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs a two-rank rdmx program as two local processes sharing a file store:
#   scripts/run_example.sh build/examples/rdmx_write_read [args...]
# Both ranks are bounded by RDMX_EXAMPLE_TIMEOUT seconds (default 120); if one
# fails the other is stopped at once. Exits non-zero if either rank fails.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 <program> [args...]" >&2
  exit 2
fi
program=$1
shift
if [[ ! -x "$program" ]]; then
  echo "run_example: $program is not an executable (build it first: make build)" >&2
  exit 2
fi

time_limit=${RDMX_EXAMPLE_TIMEOUT:-120}
# Inside rdmx every wait is bounded by RDMX_TIMEOUT; keep it under the
# script's limit so a stuck rank reports what it waited for.
export RDMX_TIMEOUT=${RDMX_TIMEOUT:-30}
export RDMX_WORLD_SIZE=2
# Both ranks are on this host: keep the traffic on loopback unless told otherwise.
export RDMX_SOCKET_IFNAME=${RDMX_SOCKET_IFNAME:-lo}

store_dir=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-example.XXXXXX")
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  rm -rf "$store_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "run_example: 2 ranks of $program, store file:$store_dir, limit ${time_limit}s"
for rank in 0 1; do
  RDMX_RANK=$rank RDMX_STORE="file:$store_dir" timeout --kill-after=5 "$time_limit" "$program" "$@" &
  pids+=($!)
done

declare -A rank_of_pid=([${pids[0]}]=0 [${pids[1]}]=1)
failed=0
while ((${#rank_of_pid[@]} > 0)); do
  status=0
  finished=""
  wait -n -p finished "${!rank_of_pid[@]}" || status=$?
  rank=${rank_of_pid[$finished]}
  unset "rank_of_pid[$finished]"
  if ((status == 0)); then
    continue
  elif ((failed)); then
    echo "run_example: rank $rank stopped after the other rank failed" >&2
  elif ((status == 124)); then
    echo "run_example: rank $rank ran past ${time_limit}s and was stopped" >&2
  else
    echo "run_example: rank $rank failed (exit status $status)" >&2
  fi
  if ((!failed)); then
    failed=1
    # The survivor would only wait for its peer until RDMX_TIMEOUT: stop it now.
    for pid in "${!rank_of_pid[@]}"; do
      kill -TERM "$pid" 2>/dev/null || true
    done
  fi
done

if ((failed)); then
  echo "run_example: FAILED" >&2
  exit 1
fi
echo "run_example: both ranks succeeded"

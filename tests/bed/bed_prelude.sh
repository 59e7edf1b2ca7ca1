# SPDX-License-Identifier: MIT
# Sourced by the bed tests with their BUILD_DIR: sets build, src, bed (the
# bed script) and rdmx (the binary), and skips (exit 77) where the bed
# cannot run; gives the tests fail_with_logs and rank0.
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bed=$src/scripts/bed.sh
rdmx=$build/tools/rdmx
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIP: the bed needs root, ip and tc (iproute2)"
  exit 77
fi

# WHO MESSAGE: says what failed, shows every log of the test's $work, exits 1.
fail_with_logs() {
  echo "$1: $2" >&2
  local log
  for log in "$work"/*.log; do
    echo "--- $log:" >&2
    cat "$log" >&2
  done
  exit 1
}

# Rank 0's lines of a bed run's log, without their "[0] " prefix.
rank0() { sed -n 's/^\[0\] //p' "$1"; }

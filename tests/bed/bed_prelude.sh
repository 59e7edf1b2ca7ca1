# SPDX-License-Identifier: MIT
# Sourced by the bed tests with their BUILD_DIR: sets build, src, bed (the
# bed script) and rdmx (the binary), and skips (exit 77) where the bed
# cannot run.
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bed=$src/scripts/bed.sh
rdmx=$build/tools/rdmx
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIP: the bed needs root, ip and tc (iproute2)"
  exit 77
fi

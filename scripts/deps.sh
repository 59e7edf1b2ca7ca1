#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what rdmx needs from Debian, only what is missing. Idempotent,
# non-interactive, and quiet when everything is present.
#   scripts/deps.sh            build + test dependencies (torch, pybind11 and
#                              pytest for the torch.distributed backend; clang's
#                              sanitizer and libFuzzer runtimes, and llvm's
#                              symbolizer, for make test's check build)
#   scripts/deps.sh --bench    also the peers the benchmarks compare with:
#                              sockperf and iperf3 (bench/run_tcp.sh), UCX's
#                              ucx_perftest and Open MPI (bench/run_shm.sh);
#                              torchvision, OpenBLAS and jemalloc for the DDP
#                              steps of bench/torch/run.sh (Debian's torch
#                              otherwise multiplies with the reference BLAS)
#   scripts/deps.sh --verbs-vm what scripts/rxe-vm.sh needs to boot the
#                              soft-RoCE guest (qemu, busybox, rdma-core, perftest)
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev iproute2
          libcli11-dev nlohmann-json3-dev libhwloc-dev libsodium-dev libibverbs-dev ibverbs-providers
          python3-dev pybind11-dev python3-torch libtorch-dev python3-pytest openmpi-bin clang-format clang
          libclang-rt-dev llvm)
case "${1:-}" in
  --bench) packages+=(sockperf iperf3 python3 ucx-utils openmpi-bin libopenmpi-dev python3-torch python3-torchvision
                    libopenblas0-pthread libjemalloc2) ;;
  --verbs-vm) packages+=(qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core ibverbs-utils perftest) ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "deps: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${missing[*]}"

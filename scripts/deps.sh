#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what rdmx needs from Debian, only what is missing. Idempotent,
# non-interactive, quiet when everything is present, and it names each
# package it installs.
#   scripts/deps.sh --build    what building the library, the rdmx command and
#                              the examples needs (make run, make example,
#                              make install): compiler, CMake, Ninja, CLI11,
#                              nlohmann-json, hwloc, libsodium, libibverbs, and
#                              GoogleTest, which configuring the tree needs
#   scripts/deps.sh            all of --build, and what make test needs:
#                              torch, pybind11 and pytest for the
#                              torch.distributed backend; clang, its sanitizer
#                              and libFuzzer runtimes and llvm's symbolizer for
#                              the check build; clang-format; Open MPI and
#                              iproute2 for the launcher and namespace tests;
#                              Google Benchmark for bench/reduce_bench
#   scripts/deps.sh --bench    all of the above, and the peers the benchmarks
#                              compare with: sockperf and iperf3
#                              (bench/run_tcp.sh), UCX's ucx_perftest and Open
#                              MPI (bench/run_shm.sh); torchvision, OpenBLAS
#                              and jemalloc for the DDP steps of
#                              bench/torch/run.sh (Debian's torch otherwise
#                              multiplies with the reference BLAS)
#   scripts/deps.sh --verbs-vm all of the above but the benchmarks' peers, and
#                              what scripts/rxe-vm.sh needs to boot the
#                              soft-RoCE guest (qemu, busybox, rdma-core, perftest)
# --stamp FILE (after the mode) touches FILE when a package was installed,
# so that make reconfigures a build tree configured before it was there.
set -euo pipefail

build_packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libcli11-dev
                nlohmann-json3-dev libhwloc-dev libsodium-dev libibverbs-dev ibverbs-providers)
test_packages=(iproute2 libbenchmark-dev python3-dev pybind11-dev python3-torch libtorch-dev python3-pytest
               openmpi-bin clang-format clang libclang-rt-dev llvm)

mode=test
stamp=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) mode=build ;;
    --bench) mode=bench ;;
    --verbs-vm) mode=verbs-vm ;;
    --stamp) stamp="${2:?--stamp needs a file}"; shift ;;
    *) echo "deps: unknown argument '$1' (--build, --bench, --verbs-vm, --stamp FILE)" >&2; exit 2 ;;
  esac
  shift
done

packages=("${build_packages[@]}")
case "$mode" in
  test) packages+=("${test_packages[@]}") ;;
  bench) packages+=("${test_packages[@]}" sockperf iperf3 python3 ucx-utils libopenmpi-dev python3-torchvision
                    libopenblas0-pthread libjemalloc2) ;;
  verbs-vm) packages+=("${test_packages[@]}" qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-utils
                       perftest) ;;
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
if [[ -n $stamp ]]; then
  mkdir -p "$(dirname "$stamp")"
  touch "$stamp"
fi

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
#   scripts/deps.sh            all of --build, and what make test needs: the
#                              Python packages of python/requirements.txt
#                              (torch, pytest, ...: pinned, from PyPI) in a
#                              virtual environment every clone on the machine
#                              shares (RDMX_VENV, default
#                              ~/.cache/rdmx/venv); clang, its sanitizer
#                              and libFuzzer runtimes and llvm's symbolizer for
#                              the check build; clang-format; Open MPI and
#                              iproute2 for the launcher and namespace tests,
#                              nftables for the bed test's firewall;
#                              Google Benchmark for bench/reduce_bench
#   scripts/deps.sh --bench    all of the above, and the peers the benchmarks
#                              compare with: sockperf and iperf3
#                              (bench/run_tcp.sh), UCX's ucx_perftest and Open
#                              MPI (bench/run_shm.sh); jemalloc for the
#                              training steps of bench/torch/run.sh
#   scripts/deps.sh --verbs-vm all of the above but the benchmarks' peers, and
#                              what scripts/rxe-vm.sh needs to boot the
#                              soft-RoCE guest (qemu, busybox, rdma-core, perftest)
# --stamp FILE (after the mode) touches FILE when a package was installed,
# so that make reconfigures a build tree configured before it was there.
set -euo pipefail

build_packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libcli11-dev
                nlohmann-json3-dev libhwloc-dev libsodium-dev libibverbs-dev ibverbs-providers)
test_packages=(iproute2 nftables libbenchmark-dev openmpi-bin clang-format clang libclang-rt-dev llvm)

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
  bench) packages+=("${test_packages[@]}" sockperf iperf3 python3 ucx-utils libopenmpi-dev libjemalloc2) ;;
  verbs-vm) packages+=("${test_packages[@]}" qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-utils
                       perftest) ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
installed_something=""
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "deps: installing missing Debian packages: ${missing[*]}"
  if [[ -n $SUDO ]] && ! command -v sudo >/dev/null; then
    echo "deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "deps: installed ${missing[*]}"
  installed_something=yes
fi

# The Python side (make test and up): python/requirements.txt, pinned, in a
# virtual environment outside the clone, so that every clone (CI's clean
# one included) reuses it. It is brought up to date when the requirements
# file changes; pip's own cache keeps a second download away.
if [[ $mode != build ]]; then
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${RDMX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdmx/venv}"
  requirements="$here/python/requirements.txt"
  want="$(sha256sum "$requirements" | cut -d' ' -f1)"
  stamp_file="$venv/.rdmx-requirements"
  if [[ ! -x $venv/bin/python || "$(cat "$stamp_file" 2>/dev/null)" != "$want" ]]; then
    if [[ ! -x $venv/bin/python ]]; then
      python="$(command -v python3 || true)"
      if [[ -z $python ]] || ! "$python" -c "import venv, ensurepip, sysconfig, os, sys; \
          sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('include'), 'Python.h')))" 2>/dev/null; then
        # No python3 with venv and headers on PATH: Debian's, with what it lacks.
        echo "deps: installing Debian's python3-venv and python3-dev for the virtual environment"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv python3-dev \
          >/dev/null
        python=/usr/bin/python3
      fi
      echo "deps: creating the Python virtual environment $venv (with $python, $("$python" --version 2>&1))"
      mkdir -p "$(dirname "$venv")"
      "$python" -m venv "$venv"
    fi
    echo "deps: installing python/requirements.txt into $venv (first time: about 5.4 GB, a minute or two)"
    started=$(date +%s)
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
    echo "$want" >"$stamp_file"
    echo "deps: Python packages ready in $(( $(date +%s) - started )) s: $("$venv/bin/python" -c \
      'import torch; print("torch", torch.__version__)') ($(du -sh "$venv" | cut -f1) in $venv)"
    installed_something=yes
  fi
fi

if [[ -n $stamp && -n $installed_something ]]; then
  mkdir -p "$(dirname "$stamp")"
  touch "$stamp"
fi

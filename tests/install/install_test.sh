#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs rdmx from BUILD_DIR into a temporary prefix, builds
# examples/write_read.cpp as an outside project once with find_package(rdmx)
# and once with pkg-config, runs each on two ranks with the installed
# `rdmx run`, and imports the installed Python package.
#   tests/install/install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
export RDMX_TIMEOUT=${RDMX_TIMEOUT:-30} RDMX_SOCKET_IFNAME=lo

step() { echo "== install test: $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
for f in bin/rdmx bin/rdmx_store include/rdmx/comm.hpp include/rdmx/version.hpp lib/cmake/rdmx/rdmxConfig.cmake \
         lib/pkgconfig/rdmx.pc; do
  [[ -e $prefix/$f ]] || { echo "install test: $prefix/$f is missing" >&2; exit 1; }
done
ls "$prefix"/lib/librdmx.so* >/dev/null
"$prefix/bin/rdmx" --version

step "outside project with find_package(rdmx)"
cmake -S "$src/tests/install" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
      -DRDMX_EXAMPLE_SOURCE="$src/examples/write_read.cpp" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
# The installed library, not the build tree's: the binary's runpath names the prefix.
# ldd's whole output first: under pipefail, grep -q exiting at the first
# match can end ldd by SIGPIPE and fail the pipeline although it matched.
libs=$(ldd "$work/cmake-build/write_read")
if grep -q "$build" <<<"$libs"; then
  echo "install test: the outside build links the build tree's library" >&2; exit 1
fi
"$prefix/bin/rdmx" run -n 2 --time-limit 60 -- "$work/cmake-build/write_read" 1048576

step "outside build with pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
g++ -O2 -o "$work/write_read_pc" "$src/examples/write_read.cpp" $(pkg-config --cflags --libs rdmx)
libs=$(ldd "$work/write_read_pc")
grep -q "$prefix/lib/librdmx.so" <<<"$libs" || { echo "install test: pkg-config build does not use $prefix" >&2; exit 1; }
"$prefix/bin/rdmx" run -n 2 --time-limit 60 -- "$work/write_read_pc" 1048576

site=$(find "$prefix" -path '*-packages/rdmx/__init__.py' -printf '%h\n' | head -1)
if [[ -n $site ]]; then
  step "python package from $(dirname "$site")"
  PYTHONPATH=$(dirname "$site") "${RDMX_TEST_PYTHON:-python3}" -c "
import rdmx, sys
assert rdmx.__file__.startswith('$prefix'), rdmx.__file__
info = rdmx.info()
assert info['schema'] == 'rdmx.info/1', info.keys()
print('rdmx', rdmx.__version__, 'from', rdmx.__file__, '; providers:', [p['name'] for p in info['providers']])
try:
    import rdmx.torch
    print('rdmx.torch registered the backend', rdmx.torch.BACKEND_NAME)
except ImportError as e:
    print('rdmx.torch not importable here:', e)
    sys.exit(1 if '$RDMX_EXPECT_TORCH' == 'ON' else 0)
"
else
  echo "install test: no Python package installed (not built)"
fi
step "passed"

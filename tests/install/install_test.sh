#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that the target make install builds (rdmx_install_set) makes every
# file that cmake --install copies out of BUILD_DIR, installs rdmx from
# BUILD_DIR into a temporary prefix with make install, builds
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

# cmake --install right after a partial build (make run) stops at the first
# file nothing built; make install builds rdmx_install_set first, which must
# hold every executable, library and module the install rules copy.
step "rdmx_install_set builds every file cmake --install copies from $build"
unversioned() { sed -E 's/\.so(\.[0-9]+)+$/.so/'; }
set_inputs=$(ninja -C "$build" -t query rdmx_install_set | sed -n 's/^    //p' | unversioned)
# This tree's install scripts only, not those of build trees nested in it
# (the wheel's, tests/wheel/wheel_test.sh).
prune=()
while IFS= read -r nested; do prune+=(-path "$nested" -prune -o); done \
  < <(find "$build" -mindepth 2 -name CMakeCache.txt -printf '%h\n')
installed=$(find "$build" "${prune[@]}" -name cmake_install.cmake -print0 |
            xargs -0 grep -h -A3 -E 'TYPE (EXECUTABLE|SHARED_LIBRARY|MODULE) FILES' |
            grep -oE "\"$build/[^\"]+\"" | tr -d '"' | sed "s|^$build/||" | unversioned | sort -u)
[[ -n $installed ]] || { echo "install test: no installed binaries found in $build/cmake_install.cmake" >&2; exit 1; }
for f in $installed; do
  grep -qxF "$f" <<<"$set_inputs" || { echo "install test: cmake --install copies $build/$f, which rdmx_install_set does not build" >&2; exit 1; }
done

step "make install BUILD=$build PREFIX=$prefix"
make -C "$src" --no-print-directory install BUILD="$build" PREFIX="$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }
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

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make device-check: everything a lent GPU machine runs, in one bounded
# command (docs/GPU.md, "On a lent GPU machine").
#
#   scripts/device_check.sh --prepare
#       here, before the device call: fetches what the device lacks to build
#       rdmx (Debian packages: GoogleTest, CLI11, nlohmann-json, hwloc,
#       libsodium, libibverbs; pybind11 and pytest as pure-Python fallbacks;
#       Python headers) into build-device/ (ignored, carried), checks them and
#       prints the exact `run` call.
#   scripts/device_check.sh --print-call
#       prints that call again.
#   scripts/device_check.sh --run [--build DIR] [--python PY] [--out DIR]
#       on the device (no package registry, no root needed): unpacks them into
#       a private prefix, builds a Release tree with CUDA with 16 jobs, the
#       Python extension against that machine's python3 and torch, runs the
#       plain GPU test cases, the torch backend on CUDA tensors and the GPU
#       benchmarks, and writes $OUT/summary.txt and at most 5 logs. With
#       --build, an existing tree instead of a new one.
#   scripts/device_check.sh --dry [--build DIR] [--python PY] [--out DIR]
#       the same stages here on the simulated CUDA driver, on an existing
#       build tree, with a sample of each test group and small sizes; fails
#       when a stage breaks (a pattern matching nothing, a missing binary, a
#       refused option). ctest runs it (DeviceCheck.DryRunOnTheSimulatedDriver).
#
# Every stage is bounded in time; one that fails is named in the summary and
# the stages that do not need it still run. RDMX_DEVCHECK_SECONDS bounds the
# whole (default 470 on the device, 240 dry); RDMX_DEVCHECK_PYTHON picks the
# interpreter (default python3 on the device, the build's dry).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 2
stash="build-device"
mode="" build="" out="" py=${RDMX_DEVCHECK_PYTHON:-}
usage() {
  echo "usage: $0 --prepare | --run [--build DIR] [--python PY] [--out DIR] | --dry [--build DIR] [--python PY] [--out DIR]" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --prepare) mode=prepare ;;
    --run) mode=run ;;
    --dry) mode=dry ;;
    --print-call) mode=print-call ;;
    --build) build=${2:?--build needs a directory}; shift ;;
    --python) py=${2:?--python needs an interpreter}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    *) usage ;;
  esac
  shift
done
[[ -n $mode ]] || usage

# What --prepare fetches: the build packages of scripts/deps.sh that a bare
# machine with a compiler, CMake, Ninja, nvcc and python3 lacks, with the
# libraries they need at link and run time (only those the system lacks are
# put on the loader's path there).
debs=(libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libhwloc-dev libhwloc15 libudev1 libsodium-dev
      libsodium23 libibverbs-dev libibverbs1 libnl-3-200 libnl-route-3-200 libnl-3-dev libnl-route-3-dev)
# Files whose presence in the unpacked prefix shows each package arrived.
prefix_files=(usr/include/gtest/gtest.h usr/include/gmock/gmock.h usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake
              usr/include/CLI/CLI.hpp usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake usr/include/hwloc.h
              usr/lib/x86_64-linux-gnu/libhwloc.so usr/include/sodium.h usr/lib/x86_64-linux-gnu/libsodium.so
              usr/include/infiniband/verbs.h usr/lib/x86_64-linux-gnu/libibverbs.so)
# The test groups: the plain (not SimulatedGpu.) CUDA cases, by binary, in
# the order they start (the conformance cases, the most, last).
groups=(
  "driver semantics|rdmx_cuda_tests|^CudaDriverSemantics\\."
  "ipc|rdmx_cuda_tests|^CudaIpc(Refusal)?\\."
  "stream ordering|rdmx_cuda_tests|^CudaStreamOrdering\\."
  "device memory|rdmx_cuda_tests|^Providers/DeviceMemory\\."
  "device-memory collectives|rdmx_cuda_tests|^DeviceMemoryCollectives\\."
  "shm peer mapping|rdmx_cuda_tests|^ShmPeerMapping\\."
  "staging budget|rdmx_cuda_tests|^Providers/StagingBudget\\."
  "memory types|rdmx_cuda_tests|^MemoryTypes\\."
  "collectives (CollCuda default share)|rdmx_coll_tests|^CollCuda/"
  "reductions (CudaReduce)|rdmx_reduce_tests|^CudaReduce\\."
  "conformance, cudaMalloc memory|rdmx_conformance_tests|^CudaMemory/Conformance\\."
  "conformance, cuMemCreate memory|rdmx_conformance_tests|^CudaVmmMemory/Conformance\\."
)
cxx_targets=(rdmx_cli rdmx_cuda_tests rdmx_conformance_tests rdmx_coll_tests rdmx_reduce_tests)
torch_cuda_tests=tests/python/test_torch_cuda.py
torch_coll_bench=bench/coll/torch_coll_perf.py

# ---------------------------------------------------------------- prepare
if [[ $mode == prepare ]]; then
  set -e
  rm -rf "$stash/debs" "$stash/pylib" "$stash/python-include" "$stash/prefix-check"
  mkdir -p "$stash/debs" "$stash/pylib" "$stash/python-include"
  echo "device-check: fetching ${#debs[@]} Debian packages into $stash/debs"
  (cd "$stash/debs" && apt-get download "${debs[@]}" 2>&1 | grep -v -e '^Get:' -e 'unsandboxed' || true)
  got=$(find "$stash/debs" -name '*.deb' | wc -l)
  if ((got != ${#debs[@]})); then
    echo "device-check: fetched $got of ${#debs[@]} packages (apt-get download ${debs[*]}; apt-get update first?)" >&2
    exit 1
  fi
  # pybind11 and pytest (pure Python) from the interpreter the build uses,
  # appended to the device's PYTHONPATH: its own copies win where it has them.
  src_py=${py:-${RDMX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdmx/venv}/bin/python}
  site=$("$src_py" -c 'import pybind11, pytest, os; print(os.path.dirname(os.path.dirname(pybind11.__file__)))')
  for pkg in pybind11 _pytest pytest pluggy iniconfig packaging pygments py.py; do
    for p in "$site/$pkg" "$site/$pkg"-*.dist-info; do
      [[ -e $p ]] && cp -r "$p" "$stash/pylib/"
    done
  done
  find "$stash/pylib" -name __pycache__ -prune -exec rm -rf {} +
  # Headers of CPython 3.12 (the device's, last seen) for an interpreter
  # shipped without them; used only where the device's own are missing.
  for inc in /usr/include/python3.1[2-9] "$HOME"/.pyenv/versions/3.1[2-9]*/include/python3.1[2-9]; do
    name=$(basename "$inc")
    [[ -f $inc/Python.h && ! -e $stash/python-include/$name ]] && cp -r "$inc" "$stash/python-include/$name"
  done
  # The unpacked packages must hold what the build looks for.
  mkdir -p "$stash/prefix-check"
  for d in "$stash"/debs/*.deb; do dpkg -x "$d" "$stash/prefix-check"; done
  for f in "${prefix_files[@]}"; do
    [[ -e $stash/prefix-check/$f ]] || { echo "device-check: $f is in none of the packages" >&2; exit 1; }
  done
  rm -rf "$stash/prefix-check"
  { git rev-parse HEAD && git status --short | sed 's/^/  /'; } >"$stash/commit.txt" 2>/dev/null || true
  size=$(du -sm "$stash" --exclude=build --exclude=prefix | cut -f1)
  echo "device-check: $stash holds ${size} MiB to carry (limit 64): $(ls "$stash/debs" | wc -l) packages, pylib" \
       "($(find "$stash/pylib" -mindepth 1 -maxdepth 1 ! -name '*.dist-info' | wc -l) Python packages)," \
       "headers: $(cd "$stash/python-include" && echo *)"
  if ((size >= 60)); then echo "device-check: $stash is too large to carry" >&2; exit 1; fi
  mode=print-call
fi
if [[ $mode == print-call ]]; then
  [[ -d $stash/debs ]] || echo "device-check: no $stash/debs yet: run make device-check-prepare first" >&2
  cat <<EOF

The device call (one run of about 8 minutes, plus the machine's start):
  run  command:   bash scripts/device_check.sh --run
       carry:     ["$stash/debs", "$stash/pylib", "$stash/python-include", "$stash/commit.txt"]
       timeout_s: 560
It writes \$OUT/summary.txt and its logs (docs/GPU.md). Call give_back after it.
EOF
  exit 0
fi

# ---------------------------------------------------------------- run and dry: common
started=$(date +%s)
if [[ $mode == run ]]; then
  budget=${RDMX_DEVCHECK_SECONDS:-470}
  out=${out:-${OUT:-}}
  [[ -n $out ]] || { echo "device-check: --run writes into \$OUT (the device tool sets it) or --out DIR" >&2; exit 2; }
  work=$repo/$stash/work
  # A tree given with --build is used as it is (a second call on a warm
  # machine, or the run's plumbing tried on a host without a GPU).
  fresh=1
  [[ -n $build ]] && fresh=0
  build=$(mkdir -p "${build:-$stash/build}" && cd "${build:-$stash/build}" && pwd)
  jobs=16
  # The interpreter with the machine's torch: python3, else another on PATH.
  if [[ -z $py ]]; then
    for c in python3 python3.12 python /usr/local/bin/python3 /usr/bin/python3; do
      c=$(command -v "$c") || continue
      if timeout 60 "$c" -c 'import torch' 2>/dev/null; then py=$c; break; fi
    done
    py=${py:-$(command -v python3)}
  fi
else
  budget=${RDMX_DEVCHECK_SECONDS:-240}
  fresh=0
  build=$(cd "${build:-build}" && pwd) || { echo "device-check: no build tree ${build:-build}" >&2; exit 2; }
  work=$build/device-check-dry
  out=${out:-$work/out}
  jobs=2
  if [[ -z $py ]]; then
    py=$(sed -n 's/^_Python_EXECUTABLE:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null | head -1)
    py=${py:-$(command -v python3)}
  fi
fi
deadline=$((started + budget))
mkdir -p "$out" "$work"
rm -rf "${work:?}"/{bench,logs,ctest,prefix} "$work"/*.tsv "$work"/*.log "$work"/*.xml
mkdir -p "$work/bench" "$work/logs"
log=$work/logs
unset RDMX_COLL_MATRIX RDMX_COLL_ALGOS RDMX_PROVIDER
export RDMX_SOCKET_IFNAME=lo

# The driver the GPU stages load: the device's own, or dry the simulated one.
gpu_env=()
[[ $mode == dry ]] && gpu_env=(LD_LIBRARY_PATH="$build/tests/cuda_sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

now() { date +%s; }
left() { echo $((deadline - $(now))); }
# bound SECONDS LOGFILE CMD...: runs CMD bounded in time, its output appended to LOGFILE.
bound() {
  local secs=$1 file=$2
  shift 2
  ((secs < 1)) && secs=1
  echo "+ [$secs s] $*" >>"$file"
  timeout --kill-after=10 "$secs" "$@" >>"$file" 2>&1
}
# stage NAME STATUS SECONDS NOTE: one line of stages.tsv (pass, FAIL, skip).
stage() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$work/stages.tsv"; echo "device-check: $1: $2 ($3 s) $4"; }
# cap WANTED RESERVE: WANTED seconds, or what is left before RESERVE seconds
# for the later stages.
cap() {
  local l=$(($(left) - $2))
  ((l < 5)) && l=5
  ((l < $1)) && echo "$l" || echo "$1"
}
timed_out() { [[ $1 == 124 || $1 == 137 ]]; }

{
  echo "mode: $mode"
  echo "date: $(date -u +%FT%TZ)"
  # The device's copy of the tree has no .git: --prepare wrote the commit.
  echo "commit: $(git rev-parse HEAD 2>/dev/null || head -1 "$stash/commit.txt" 2>/dev/null || echo unknown)"
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
       "$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 ||
              echo none)"
  echo "tools: $(gcc --version 2>/dev/null | head -1); $(cmake --version 2>/dev/null | head -1);" \
       "ninja $(ninja --version 2>/dev/null); $(nvcc --version 2>/dev/null | tail -1)"
  echo "python: $py ($("$py" --version 2>&1));" \
       "$(timeout 60 "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
            "available" if torch.cuda.is_available() else "unavailable")' 2>&1 | tail -1)"
} >"$work/env.txt"
cat "$work/env.txt"

# ---------------------------------------------------------------- unpack and configure
prefix=$work/prefix
have_debs=0
[[ -n $(ls "$stash"/debs/*.deb 2>/dev/null) ]] && have_debs=1
t0=$(now)
if ((have_debs)); then
  rm -rf "$prefix" && mkdir -p "$prefix/missing"
  bad=""
  for d in "$stash"/debs/*.deb; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$d" "$prefix" 2>>"$log/build.log" || bad+=" $(basename "$d")"
    else
      (t=$(mktemp -d) && cd "$t" && ar x "$repo/$d" && tar -xf data.tar.* -C "$prefix" && rm -rf "$t") ||
        bad+=" $(basename "$d")"
    fi
  done
  for f in "${prefix_files[@]}"; do [[ -e $prefix/$f ]] || bad+=" (no $f)"; done
  # Libraries the system lacks go on the loader's path, no others.
  missing="" known=$(/sbin/ldconfig -p 2>/dev/null)
  for f in "$prefix"/usr/lib/x86_64-linux-gnu/lib*.so.* "$prefix"/lib/x86_64-linux-gnu/lib*.so.*; do
    name=$(basename "$f")
    [[ $name =~ ^lib.*\.so\.[0-9]+$ ]] || continue
    if ! grep -q "^[[:space:]]$name " <<<"$known"; then
      ln -sf "$(cd "$(dirname "$f")" && pwd)/$name" "$prefix/missing/$name" && missing+=" $name"
    fi
  done
  if [[ -z $bad ]]; then
    stage unpack pass $(($(now) - t0)) "$(ls "$stash"/debs/*.deb | wc -l) packages; the system lacks:${missing:- nothing}"
  else
    stage unpack FAIL $(($(now) - t0)) "not unpacked:$bad"
  fi
else
  if [[ $mode == run ]]; then
    stage unpack FAIL 0 "no $stash/debs: run scripts/device_check.sh --prepare here and carry $stash/debs"
  else
    stage unpack skip 0 "no $stash/debs (make device-check-prepare fetches them)"
  fi
fi

pylib=$repo/$stash/pylib
pypath=$build/python${PYTHONPATH:+:$PYTHONPATH}
[[ -d $pylib ]] && pypath+=":$pylib"
# A C++ compiler with a shared libstdc++: with only the static one, the
# torch backend is not built (python/CMakeLists.txt says why).
shared_runtime_cxx() {
  local c
  for c in "${CXX:-}" g++ /usr/bin/g++ /usr/bin/g++-1[0-9]; do
    [[ -n $c ]] && c=$(command -v "$c") || continue
    [[ $("$c" -print-file-name=libstdc++.so 2>/dev/null) == /* ]] && { echo "$c"; return; }
  done
  echo "${CXX:-}"
}
# configure DIR: the device's tree, pointed at the prefix and the interpreter.
configure() {
  local dir=$1 libdirs="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu" args=()
  local pyinc pyver
  args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DRDMX_CUDA_ARCHS=90 -DRDMX_BUILD_BENCH=OFF -DRDMX_THREAD_SAFETY=OFF
        "-DRDMX_PYTHON=$py")
  if ((have_debs)); then
    args+=("-DCMAKE_PREFIX_PATH=$prefix/usr;$prefix" "-DCMAKE_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu"
           "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$libdirs" "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$libdirs"
           "-DCMAKE_MODULE_LINKER_FLAGS=-Wl,-rpath-link,$libdirs")
  fi
  pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
  pyver=$("$py" -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null)
  if [[ ! -f $pyinc/Python.h && -f $stash/python-include/$pyver/Python.h ]]; then
    args+=("-DPython_INCLUDE_DIR=$repo/$stash/python-include/$pyver")
    echo "device-check: $py has no Python.h; using the carried $pyver headers" >>"$log/build.log"
  fi
  local cxx
  cxx=$(shared_runtime_cxx)
  [[ -n $cxx ]] && args+=("-DCMAKE_CXX_COMPILER=$cxx")
  PYTHONPATH=$pypath bound "$(cap 90 60)" "$log/build.log" cmake -S "$repo" -B "$dir" "${args[@]}"
}
# Where the configured tree found each package, and whether the prefix served it.
found_in() {
  local cache=$1/CMakeCache.txt v out=""
  for v in RDMX_HWLOC_LIB RDMX_SODIUM_LIB RDMX_IBVERBS_LIB RDMX_CLI11_INCLUDE GTest_DIR nlohmann_json_DIR; do
    out+=" $v=$(sed -n "s/^$v:[A-Z]*=//p" "$cache" | sed "s|^$prefix|<prefix>|")"
  done
  echo "$out"
}

if [[ $mode == run ]]; then
  export LD_LIBRARY_PATH=$prefix/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$PATH:/usr/local/cuda/bin
fi
if ((fresh)); then
  t0=$(now)
  configure "$build"
  rc=$?
  if ((rc == 0)); then
    stage configure pass $(($(now) - t0)) "$(grep -o 'rdmx: Python package.*tensors[^)]*)' "$log/build.log" | tail -1 |
                                            cut -c1-200)"
  else
    stage configure FAIL $(($(now) - t0)) "cmake exited $rc (build.log)"
  fi
  t0=$(now)
  bound "$(cap 240 200)" "$log/build.log" cmake --build "$build" -j "$jobs" --target "${cxx_targets[@]}" -- -k 0
  rc=$?
  note="exit $rc"
  timed_out "$rc" && note="timed out"
elif ((have_debs)); then
  # The device's configure, here against the unpacked packages: the prefix
  # must serve every package the tree looks for.
  t0=$(now)
  configure "$work/configure-check"
  rc=$?
  where=$(found_in "$work/configure-check")
  if ((rc == 0)) && [[ $(grep -o '=<prefix>' <<<"$where" | wc -l) -ge 6 ]]; then
    stage configure pass $(($(now) - t0)) "against the prefix:$where"
  else
    stage configure FAIL $(($(now) - t0)) "cmake exited $rc; found:$where"
  fi
  rm -rf "$work/configure-check"
  t0=$(now)
  rc=0 note="the existing tree $build"
else
  stage configure skip 0 "the existing tree $build"
  t0=$(now)
  rc=0 note="the existing tree $build"
fi
# Each stage below needs its binaries only.
missing_bins=""
for t in "${cxx_targets[@]}"; do
  f=$build/tests/$t
  [[ $t == rdmx_cli ]] && f=$build/tools/rdmx
  [[ -x $f ]] || missing_bins+=" $t"
done
if [[ -z $missing_bins && $rc == 0 ]]; then
  stage build pass $(($(now) - t0)) "${cxx_targets[*]} ($note)"
else
  stage build FAIL $(($(now) - t0)) "missing:${missing_bins:- none} ($note; build.log)"
fi

# The Python extension builds while the C++ tests run (they need the GPU more
# than the cores).
py_pid=""
if ((fresh)); then
  py_targets=$(cmake --build "$build" --target help 2>/dev/null | grep -o -E '^rdmx_python_(core|torch)' | tr '\n' ' ')
  if [[ -n $py_targets ]]; then
    py_t0=$(now)
    # shellcheck disable=SC2086
    (bound "$(cap 240 130)" "$log/python-build.log" nice -n 5 cmake --build "$build" -j "$jobs" --target $py_targets;
     echo $? >"$work/python-build.rc") &
    py_pid=$!
  else
    stage build-python FAIL 0 "not configured: $(grep -o 'rdmx: Python package not built[^(]*\|torch backend not built[^(]*' \
                                                    "$log/build.log" | tail -1)"
  fi
elif ls "$build"/python/rdmx/_core*.so "$build"/python/rdmx/_torch*.so >/dev/null 2>&1; then
  stage build-python pass 0 "rdmx._core and rdmx._torch in the existing tree"
else
  stage build-python FAIL 0 "rdmx._core or rdmx._torch missing in $build/python"
fi

# ---------------------------------------------------------------- GPU tests
# ctest runs from a directory of its own whose test file includes the tree's,
# so that a dry run inside the tree's own ctest leaves that one's logs alone.
ctdir=$work/ctest
mkdir -p "$ctdir"
echo "subdirs(\"$build/tests\")" >"$ctdir/CTestTestfile.cmake"
t0=$(now)
: >"$work/groups.tsv"
ids=() regex="" broken=""
# "NAME<tab>NUMBER" for every test of the tree, listed once.
listing=$(cd "$ctdir" && ctest -N 2>/dev/null | sed -n 's/^ *Test *#\([0-9]*\): \(.*\)/\2\t\1/p')
# ctest starts the costliest tests first: each group costs less than the one
# before it, so a stage cut short at its time limit has run the first groups.
mkdir -p "$ctdir/Testing/Temporary"
: >"$ctdir/Testing/Temporary/CTestCostData.txt"
cost=$((100 * ${#groups[@]}))
for g in "${groups[@]}"; do
  IFS='|' read -r name bin re <<<"$g"
  grep -E "$re" <<<"$listing" | cut -f1 | sed "s/\$/ 1 $cost/" >>"$ctdir/Testing/Temporary/CTestCostData.txt"
  cost=$((cost - 100))
done
echo "---" >>"$ctdir/Testing/Temporary/CTestCostData.txt"
for g in "${groups[@]}"; do
  IFS='|' read -r name bin re <<<"$g"
  printf '%s\t%s\n' "$name" "$re" >>"$work/groups.tsv"
  if [[ " $missing_bins " == *" $bin "* ]]; then broken+=" [$name: $bin not built]"; continue; fi
  listed=$(grep -E "$re" <<<"$listing" | cut -f2)
  if [[ -z $listed ]]; then broken+=" [$name: '$re' matches no test]"; continue; fi
  regex+="${regex:+|}$re"
  # Dry: the first two cases of each group (the same names as on the GPU).
  [[ $mode == dry ]] && mapfile -t -O "${#ids[@]}" ids < <(head -2 <<<"$listed")
done
if [[ -n $regex ]]; then
  if [[ $mode == dry ]]; then
    select=(-I "0,0,0,$(IFS=,; echo "${ids[*]}")")
  else
    select=(-R "$regex")
  fi
  (cd "$ctdir" && env "${gpu_env[@]}" timeout --kill-after=10 "$(cap 150 100)" \
     ctest -j "$((jobs < 12 ? jobs : 12))" --timeout 60 --output-on-failure "${select[@]}" >"$work/ctest.log" 2>&1)
  rc=$?
  # Ranks of a test stopped at the time limit must not load the benchmarks.
  pkill -9 -f "^$build/tests/rdmx_" 2>/dev/null
  counts=$(python3 "$repo/scripts/device_check_report.py" ctest-counts "$work/ctest.log")
  status=FAIL
  # On the GPU a case that skips did not run where it should have: most
  # skipping means the GPU is out of the tests' reach.
  if [[ -z $broken && $counts =~ \ ([0-9]+)\ passed,\ ([0-9]+)\ failed,\ ([0-9]+)\ skipped ]] &&
     ((BASH_REMATCH[1] > 0 && BASH_REMATCH[2] == 0)); then
    status=pass
    if [[ $mode == run ]] && ((BASH_REMATCH[3] > BASH_REMATCH[1])); then
      status=FAIL counts+=" (most cases skipped: is the GPU visible to them?)"
    fi
  fi
  timed_out "$rc" && counts+=", stopped at the stage's time limit"
  stage gpu-tests "$status" $(($(now) - t0)) "$counts${broken:+; not run:$broken}"
else
  stage gpu-tests FAIL $(($(now) - t0)) "nothing to run:$broken"
fi

# ---------------------------------------------------------------- the Python extension
if [[ -n $py_pid ]]; then
  wait "$py_pid"
  rc=$(cat "$work/python-build.rc" 2>/dev/null || echo 1)
  if [[ $rc == 0 ]]; then
    stage build-python pass $(($(now) - py_t0)) "rdmx._core and rdmx._torch for $py"
  else
    stage build-python FAIL $(($(now) - py_t0)) "exit $rc (python-build.log)"
  fi
  cat "$log/python-build.log" >>"$log/build.log"
fi
torch_built=$(ls "$build"/python/rdmx/_torch*.so 2>/dev/null | head -1)

# ---------------------------------------------------------------- benchmarks
rdmx=$build/tools/rdmx
# bench NAME SECONDS ARGS...: one `rdmx perf` run, its JSON kept for the summary.
bench() {
  local name=$1 secs=$2 t rc
  t=$(now)
  shift 2
  if (($(left) < 15)); then stage "bench $name" skip 0 "out of time"; return; fi
  secs=$(cap "$secs" 10)
  echo "== $name: rdmx perf $*" >>"$log/bench.log"
  env "${gpu_env[@]}" timeout --kill-after=10 "$secs" "$rdmx" perf "$@" >"$work/bench/$name.json" 2>>"$log/bench.log"
  rc=$?
  cat "$work/bench/$name.json" >>"$log/bench.log"
  if ((rc == 0)); then
    stage "bench $name" pass $(($(now) - t)) "$*"
  else
    stage "bench $name" FAIL $(($(now) - t)) "exit $rc$(timed_out "$rc" && echo " (timed out after $secs s)"): $*"
  fi
}
# (The help is read whole first: grep -q stopping early would fail the pipe.)
has_option() {
  local help
  if [[ $1 == - ]]; then help=$("$rdmx" perf --help 2>&1); else help=$("$rdmx" perf "$1" --help 2>&1); fi
  grep -q -e "$2" <<<"$help"
}
if [[ $mode == run ]]; then
  copy_sizes=(64K 1G) bw_sizes=4K..1G lat_sizes=8..1M volume=1G tcp_sizes=64K..64M tcp_volume=256M
  coll_sizes=(-b 4 -e 1G -f 4) nps=(2 4 8) torch_sizes=4,64K,1M,16M,64M
  host_np=16 host_sizes=(-b 4 -e 64M -f 4)
else
  copy_sizes=(4K 64K) bw_sizes=4K,64K lat_sizes=8 volume=1M tcp_sizes=64K tcp_volume=1M
  coll_sizes=(-b 4 -e 64K -f 64 -n 2 -w 1) nps=(2 4) torch_sizes=4,4K
  host_np=2 host_sizes=(-b 4 -e 64K -f 64 -n 2 -w 1)
fi
if [[ ! -x $rdmx ]]; then
  stage bench FAIL 0 "no $rdmx"
else
  if has_option - gpu-copy; then
    bench gpu-copy 20 gpu-copy -b "${copy_sizes[0]}" -e "${copy_sizes[1]}" --json
  else
    stage "bench gpu-copy" skip 0 "rdmx perf has no gpu-copy yet (the device-to-device roofline)"
  fi
  # In the order of what matters most, should time run short.
  p2p_cuda=0
  if has_option p2p --memory; then
    p2p_cuda=1
    bench p2p-shm-write_bw 30 p2p write_bw --provider shm --memory cuda -s "$bw_sizes" --volume "$volume" --json
    bench p2p-shm-write_lat 20 p2p write_lat --provider shm --memory cuda -s "$lat_sizes" -n 200 --json
  else
    stage "bench p2p" skip 0 "rdmx perf p2p has no --memory yet (device buffers)"
  fi
  if has_option coll --memory; then
    for np in "${nps[@]}"; do
      bench "coll-all_reduce-np$np" 40 coll all_reduce --memory cuda --np "$np" "${coll_sizes[@]}" --json
    done
  else
    stage "bench coll" skip 0 "rdmx perf coll has no --memory yet (device buffers)"
  fi
  # Host memory on every core: the small-message floor and the large-message
  # busbw past the 2-core machines (docs/PERFORMANCE.md, all_reduce on 16 cores).
  bench "coll-host-all_reduce-np$host_np" 45 coll all_reduce --memory host --np "$host_np" "${host_sizes[@]}" --json
  if ((p2p_cuda)); then
    bench p2p-tcp-device 20 p2p write_bw --provider tcp --memory cuda -s "$tcp_sizes" --volume "$tcp_volume" --json
    bench p2p-tcp-host 20 p2p write_bw --provider tcp --memory host -s "$tcp_sizes" --volume "$tcp_volume" --json
  fi
fi
# The torch backend against Gloo on the same CUDA tensors, 2 ranks.
t0=$(now)
if [[ -z $torch_built ]]; then
  stage "bench torch" FAIL 0 "rdmx._torch is not built"
elif (($(left) < 20)); then
  stage "bench torch" skip 0 "out of time"
else
  status=pass
  # Dry, without a CUDA device: the same calls on CPU tensors, so that the
  # invocation itself is tried before the device's minutes are spent.
  torch_device=cuda
  if [[ $mode == dry ]] && ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    torch_device=cpu
  fi
  for backend in rdmx gloo; do
    port=$((20000 + RANDOM % 20000)) pids=()
    for r in 0 1; do
      PYTHONPATH=$pypath RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo \
        OMP_NUM_THREADS=1 timeout --kill-after=5 "$(cap 40 10)" "$py" "$torch_coll_bench" --backend "$backend" \
        --device "$torch_device" --op all_reduce --sizes "$torch_sizes" --json "$work/bench/torch-$backend.jsonl" \
        >>"$log/torch.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=FAIL; done
  done
  stage "bench torch" "$status" $(($(now) - t0)) "all_reduce, 2 ranks, rdmx and gloo, sizes $torch_sizes, $torch_device tensors"
fi

# ---------------------------------------------------------------- torch on CUDA tensors
# Last, with what time is left: the benchmarks before it take a known time.
t0=$(now)
if [[ ! -f $torch_cuda_tests ]]; then
  stage torch-cuda skip 0 "$torch_cuda_tests does not exist yet"
elif [[ -z $torch_built ]]; then
  stage torch-cuda FAIL 0 "rdmx._torch is not built in $build/python"
elif (($(left) < 20)); then
  stage torch-cuda skip 0 "out of time"
else
  (cd tests/python && PYTHONPATH=$pypath RDMX_CLI=$build/tools/rdmx OMP_NUM_THREADS=1 \
     bound "$(cap 180 5)" "$log/torch.log" "$py" -m pytest -v -p no:cacheprovider -rfEs \
       --junitxml="$work/pytest.xml" "$repo/$torch_cuda_tests")
  rc=$?
  counts=$(python3 "$repo/scripts/device_check_report.py" pytest-counts "$work/pytest.xml" "$log/torch.log")
  status=pass
  [[ $rc == 0 || $rc == 5 ]] || status=FAIL
  timed_out "$rc" && counts+=", stopped at the stage's time limit"
  stage torch-cuda "$status" $(($(now) - t0)) "$counts"
fi


# ---------------------------------------------------------------- summary and logs
rm -f "$out"/summary.txt "$out"/*.log.gz "$out"/results.tar.gz
python3 "$repo/scripts/device_check_report.py" summary "$work" "$mode" "$(($(now) - started))" "$budget" \
  >"$out/summary.txt"
report_rc=$?
for f in build torch bench; do [[ -s $log/$f.log ]] && gzip -9c "$log/$f.log" >"$out/$f.log.gz"; done
[[ -s $work/ctest.log ]] && gzip -9c "$work/ctest.log" >"$out/tests.log.gz"
results=(env.txt stages.tsv bench)
[[ -f $work/pytest.xml ]] && results+=(pytest.xml)
tar -czf "$out/results.tar.gz" -C "$work" "${results[@]}"
cat "$out/summary.txt"
echo "device-check: summary and logs in $out: $(cd "$out" && ls | tr '\n' ' ')"
exit "$report_rc"

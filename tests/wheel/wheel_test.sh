#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# pip install as a user meets it: builds the sdist of the source tree and a
# wheel from that sdist (pyproject.toml, scikit-build-core, no build
# isolation: PYTHON's torch, build and scikit-build-core), checks that the
# wheel holds librdmx, the rdmx command and the package with both modules,
# installs it with pip into a fresh virtual environment, and from a
# directory outside the source tree runs `rdmx info`, imports rdmx.torch and
# trains a few DDP steps on 2 ranks under torchrun with backend "rdmx".
#   tests/wheel/wheel_test.sh PYTHON WORK_DIR [WHEEL]
# PYTHON: an interpreter with the pinned packages (python/requirements.txt);
# the fresh environment sees its site-packages through a .pth file, for the
# pinned torch without another download. WORK_DIR keeps the wheel's build
# directory, so a second run compiles only what changed. WHEEL: test that
# wheel instead of building one.
set -euo pipefail
python=$1
work=$(mkdir -p "$2" && cd "$2" && pwd)
wheel=${3:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

step() { echo "== wheel test: $*"; }
fail() { echo "wheel test: $*" >&2; exit 1; }
# Every step is bounded: timeout SECONDS COMMAND..., named when it runs out.
bounded() {
  local seconds=$1; shift
  local rc=0
  timeout "$seconds" "$@" || rc=$?
  [[ $rc -ne 124 ]] || fail "timed out after ${seconds}s: $*"
  return "$rc"
}

if [[ -z $wheel ]]; then
  rm -rf "$work/dist"
  step "sdist of $src"
  bounded 300 "$python" -m build --sdist --no-isolation --outdir "$work/dist" "$src" >"$work/sdist.log" 2>&1 ||
    { cat "$work/sdist.log"; fail "python -m build --sdist failed (log above)"; }
  sdist=$(ls "$work"/dist/rdmx-*.tar.gz)

  # The sdist's files carry one fixed time, so unpacking over the previous
  # tree would hide a changed file from ninja: only files whose contents
  # differ are written.
  step "unpack $(basename "$sdist") into $work/src (changed files only)"
  bounded 120 "$python" - "$sdist" "$work/src" <<'PY'
import pathlib, sys, tarfile
sdist, dest = sys.argv[1], pathlib.Path(sys.argv[2])
kept = set()
with tarfile.open(sdist) as tar:
    for member in tar.getmembers():
        if not member.isfile():
            continue
        rel = pathlib.PurePosixPath(*pathlib.PurePosixPath(member.name).parts[1:])
        kept.add(pathlib.Path(rel))
        data = tar.extractfile(member).read()
        path = dest / rel
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
for path in list(dest.rglob("*")):
    if path.is_file() and path.relative_to(dest) not in kept:
        path.unlink()
PY

  step "wheel from the sdist (build directory $work/build)"
  start=$SECONDS
  bounded 3000 "$python" -m build --wheel --no-isolation --outdir "$work/dist" -C build-dir="$work/build" \
    "$work/src" >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; fail "python -m build --wheel failed (log above)"; }
  echo "wheel built in $((SECONDS - start))s"
  wheel=$(ls "$work"/dist/rdmx-*.whl)
fi

step "contents of $(basename "$wheel")"
bounded 60 "$python" - "$wheel" <<'PY'
import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
wanted = {
    "librdmx": r"rdmx/lib/librdmx\.so\.\d+",
    "the rdmx command": r"rdmx-[^/]+\.data/scripts/rdmx",
    "the package": r"rdmx/__init__\.py",
    "the torch backend's Python side": r"rdmx/torch\.py",
    "the module rdmx._core": r"rdmx/_core\..*so",
    "the module rdmx._torch": r"rdmx/_torch\..*so",
    "the torch requirement": r"rdmx-[^/]+\.dist-info/METADATA",
}
missing = [what for what, pattern in wanted.items() if not any(re.fullmatch(pattern, n) for n in names)]
if missing:
    sys.exit(f"wheel test: {sys.argv[1]} lacks {', '.join(missing)}; it holds: {names}")
meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
requires = [l for l in zipfile.ZipFile(sys.argv[1]).read(meta).decode().splitlines() if l.startswith("Requires-Dist:")]
if not any(re.match(r"Requires-Dist: torch\s*==\s*2\.15\.\*", l) for l in requires):
    sys.exit(f"wheel test: {meta} does not require torch==2.15.*: {requires}")
print(f"{len(names)} files; {' '.join(requires)}")
PY

step "fresh virtual environment in $tmp/venv"
venv=$tmp/venv
bounded 300 "$python" -m venv "$venv"
shared_site=$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
venv_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$shared_site" >"$venv_site/rdmx_test_pinned_packages.pth"
bounded 300 "$venv/bin/python" -m pip install --no-deps --no-index --disable-pip-version-check --quiet "$wheel"

# Outside the source tree, with nothing pointing into it or the build tree.
cd "$tmp"
unset PYTHONPATH LD_LIBRARY_PATH RDMX_CLI
export PATH=$venv/bin:$PATH RDMX_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 RDMX_TIMEOUT=${RDMX_TIMEOUT:-60}

step "rdmx info (the environment's command)"
[[ $(command -v rdmx) == "$venv/bin/rdmx" ]] || fail "rdmx on PATH is $(command -v rdmx || echo nothing), not $venv/bin/rdmx"
libs=$(ldd "$venv/bin/rdmx")
lib=$(sed -n 's/^\s*librdmx\.so[.0-9]* => \(\S*\) .*/\1/p' <<<"$libs")
[[ -n $lib && $(realpath "$lib") == "$venv_site"/rdmx/lib/* ]] ||
  fail "$venv/bin/rdmx does not load the wheel's librdmx from $venv_site/rdmx/lib: $libs"
bounded 60 rdmx info >"$tmp/info.txt" || { cat "$tmp/info.txt"; fail "rdmx info failed"; }
head -5 "$tmp/info.txt"

step "import rdmx, rdmx.torch"
bounded 120 python - "$venv_site" <<'PY'
import sys
site = sys.argv[1]
import rdmx, rdmx.torch
from rdmx import _core, _torch
for module in (rdmx, rdmx.torch, _core, _torch):
    if not module.__file__.startswith(site + "/rdmx/"):
        sys.exit(f"wheel test: {module.__name__} imports from {module.__file__}, not from {site}")
loaded = {line.split()[-1] for line in open("/proc/self/maps") if "librdmx" in line}
if not loaded or any(not path.startswith(site + "/rdmx/lib/") for path in loaded):
    sys.exit(f"wheel test: the process loaded librdmx from {sorted(loaded)}, not from {site}/rdmx/lib")
print("rdmx", rdmx.__version__, "from", rdmx.__file__, "with", sorted(loaded))
PY

step "torchrun: 2 ranks of DDP with backend rdmx"
cp "$src/tests/wheel/ddp_job.py" "$tmp/"
bounded 300 python -m torch.distributed.run --standalone --nproc-per-node 2 ddp_job.py >"$tmp/ddp.txt" 2>&1 ||
  { cat "$tmp/ddp.txt"; fail "the DDP job failed"; }
cat "$tmp/ddp.txt"
for rank in 0 1; do
  grep -qF "rank $rank of 2: 5 DDP steps on backend rdmx, parameters equal on every rank (rdmx from $venv_site/rdmx)" \
    "$tmp/ddp_job.rank$rank" 2>/dev/null || fail "rank $rank did not report equal parameters with rdmx from $venv_site"
done
step "passed"

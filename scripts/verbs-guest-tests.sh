#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The verbs provider's tests on real kernel verbs: boots the soft-RoCE guest
# (scripts/rxe-vm.sh) and runs inside it, against rxe0:
#   1. tests/verbs (device, GID and RDMX_IB_HCA handling, ports of mixed MTUs,
#      collectives whose buffers change pages), shrink and grow over verbs,
#      and the unmap watch of the registration cache;
#   2. the provider conformance suite on verbs, and auto's cases about keys
#      and regions (whose regions then get the device's keys while shm
#      carries the same-host peers);
#   3. the README's example, two processes over verbs (rdmx run -n 2);
#   4. a clean job over verbs logs nothing at WARN.
# With `largest`, only the 2 GiB (max_msg_size) WRITE and READ on verbs,
# which take about 2 minutes at the guest's speed (make test-largest).
# With `torch`, only the torch recovery (tests/python/test_torch_recovery.py)
# over verbs, with the victim killed and stopped (about 8 minutes: make
# test-torch-verbs): a DDP job loses a rank, goes on and grows back.
# Importing torch takes one to two minutes in the emulated guest, so the
# ranks fork from one process that imported it, the groups' timeout is 30 s,
# and the first step after the fault may take 10 s beyond it rather than 1.
# Its Python is RDMX_TEST_PYTHON, else the virtual environment
# scripts/deps.sh makes.
#   scripts/verbs-guest-tests.sh BUILD_DIR           (CTest: VerbsInSoftRoceGuest)
#   scripts/verbs-guest-tests.sh BUILD_DIR largest   (make test-largest)
#   scripts/verbs-guest-tests.sh BUILD_DIR torch     (make test-torch-verbs)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: verbs-guest-tests.sh BUILD_DIR [largest]}" && pwd)
mode=${2:-all}

if [[ "${3:-}" != "--in-guest" ]]; then
  # Resolved here: the guest passes on RDMX_* variables, not HOME's meaning.
  export RDMX_TEST_PYTHON=${RDMX_TEST_PYTHON:-${RDMX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdmx/venv}/bin/python}
  exec bash "$here/rxe-vm.sh" bash "$here/verbs-guest-tests.sh" "$build" "$mode" --in-guest
fi

# Inside the guest. Under emulation rxe moves ~70 MB/s: the 1 GiB cases take
# ~20 s each, so RDMX_TIMEOUT is 30 s there; the rest finish in far less.
export RDMX_SOCKET_IFNAME=lo RDMX_RNR_TIMEOUT=500ms
# A job secret, as `rdmx run` gives its ranks: without one every forked rank
# warns that its control mesh is open, and those lines bury a failure's own
# in the log's tail, which is all CI keeps.
export RDMX_AUTH_KEY=${RDMX_AUTH_KEY:-rdmx-verbs-guest-job-secret-$$}
failed=()
step() {
  local name=$1
  shift
  local start=$SECONDS
  echo "== verbs guest: $name"
  if "$@"; then
    echo "== verbs guest: $name passed in $((SECONDS - start)) s"
  else
    echo "== verbs guest: $name FAILED (exit $?) after $((SECONDS - start)) s"
    failed+=("$name")
  fi
}
ibv_devices
if [[ $mode == largest ]]; then
  step "conformance, the largest message on verbs" env RDMX_TIMEOUT=180 RDMX_LARGEST_MESSAGE_PLACEMENTS=all \
    "$build/tests/rdmx_conformance_tests" --gtest_brief=1 --gtest_filter='*LargestMessage*/Verbs_Local:-Cuda*'
  if ((${#failed[@]})); then exit 1; fi
  echo "== verbs guest: the largest message passed"
  exit 0
fi
# The torch recovery over verbs, the cases `-k` picks. The ranks fork from
# one process that imported torch (RDMX_TEST_FORK_RANKS): one import instead
# of five, and ranks that start together.
torch_recovery() {
  if ! compgen -G "$build/python/rdmx/_torch*.so" >/dev/null; then
    echo "skipped: $build has no torch backend (configured without torch)"
    return 0
  fi
  [[ -x $RDMX_TEST_PYTHON ]] || { echo "no Python at $RDMX_TEST_PYTHON (scripts/deps.sh makes it)"; return 1; }
  (cd "$here/../tests/python" &&
    env PYTHONPATH="$build/python" OMP_NUM_THREADS=1 RDMX_TEST_FORK_RANKS=1 RDMX_TEST_RECOVERY_TIMEOUT_S=30 \
      RDMX_TEST_RECOVERY_SLACK_S=10 RDMX_TEST_RECOVERY_RUN_S=900 \
      "$RDMX_TEST_PYTHON" -m pytest -q -s -p no:cacheprovider --color=no test_torch_recovery.py -k "$1")
}
if [[ $mode == torch ]]; then
  step "torch recovery over verbs" torch_recovery verbs
  if ((${#failed[@]})); then exit 1; fi
  echo "== verbs guest: the torch recovery passed"
  exit 0
fi
# RDMX_TEST_MAY_CHANGE_MTU: the mixed-MTU case may lower eth0's MTU (restored after).
step "device tests, collectives over verbs" env RDMX_TIMEOUT=10 RDMX_TEST_MAY_CHANGE_MTU=1 \
  "$build/tests/rdmx_verbs_tests" --gtest_brief=1
# Going on after a rank dies, over verbs: shrink (keeping the working QPs) and grow.
# The guest runs a step many times slower than the host: the first correct
# collective after a fault may come 6 s after the timeout rather than 1.5.
step "shrink and grow over verbs" env RDMX_TEST_RECOVERY_SLACK_S=6 "$build/tests/rdmx_coll_tests" --gtest_brief=1 \
  --gtest_filter='*CollShrink*/verbs:*CollGrow*/verbs'
# The registration cache's unmap watch on the kernel verbs runs under.
step "unmap watch" "$build/tests/rdmx_core_tests" --gtest_brief=1 --gtest_filter='UnmapWatch*'
# auto: the cases about keys and regions, which then go through the NIC's
# registration while shm carries the peers (the rest of auto is shm's, run on the host).
auto_keys='*.Rdma*/Auto_Local:*.Atomic*/Auto_Local:*.Write*/Auto_Local:*.Read*/Auto_Local'
auto_keys+=':*.Deregistration*/Auto_Local:*.AllocatedMemory*/Auto_Local:*.SameBuffer*/Auto_Local:*.Batch*/Auto_Local'
auto_keys+=':*.RegistrationCache*/Auto_Local'
step "conformance on verbs, and auto's key cases" env RDMX_TIMEOUT=10 "$build/tests/rdmx_conformance_tests" \
  --gtest_brief=1 --gtest_filter="*/Verbs_Local:$auto_keys:-*LargestMessage*:Cuda*"
step "example: 2 processes over verbs" env RDMX_TIMEOUT=30 \
  "$build/tools/rdmx" run -n 2 --provider verbs --time-limit 120 -- "$build/examples/rdmx_write_read"
# A clean job logs nothing at WARN (tests/tools/clean_run_test.cpp does the same for the host's providers).
clean_job() {
  local out rc
  out=$(RDMX_TIMEOUT=30 RDMX_DEBUG=WARN "$build/tools/rdmx" run -n 2 --provider verbs --time-limit 120 -- \
    "$build/examples/rdmx_all_reduce" 100000 2>&1)
  rc=$?
  echo "$out"
  if ((rc != 0)); then return "$rc"; fi
  if grep -q ' RDMX WARN ' <<<"$out"; then
    echo "a clean job over verbs logged a warning"
    return 1
  fi
}
step "clean job over verbs logs nothing at WARN" clean_job
if ((${#failed[@]})); then
  echo "== verbs guest: failed: ${failed[*]}"
  exit 1
fi
echo "== verbs guest: all passed"

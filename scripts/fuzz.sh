#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the libFuzzer targets built in BUILD (make fuzz, make test's check
# build), each for SECONDS, from the committed seeds in fuzz/corpus/<target>/,
# FUZZ_JOBS targets at a time (default 1). New inputs go to
# BUILD/corpus/<target>/ (copy the ones worth keeping into fuzz/corpus),
# crashes to BUILD/crashes/. Prints one line per target: executions, corpus
# size, coverage; fails when a target crashed, leaked, hung or ran out of
# memory.
#   scripts/fuzz.sh BUILD SECONDS TARGET...
set -uo pipefail
build=$1 seconds=$2
shift 2
jobs=${FUZZ_JOBS:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/crashes"
for target in "$@"; do
  [[ -x $build/fuzz/fuzz_$target ]] || { echo "fuzz: $build/fuzz/fuzz_$target is not built (make fuzz builds it)" >&2; exit 2; }
done

# One target: its log in BUILD/fuzz-<target>.log, its exit status in .rc beside it.
run_target() {
  local target=$1 log=$build/fuzz-$1.log
  mkdir -p "$build/corpus/$target" "$root/fuzz/corpus/$target"
  # -timeout: one input running longer is a hang; -rss_limit_mb: a leak or a blow-up.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$target-" "$build/corpus/$target" "$root/fuzz/corpus/$target" >"$log" 2>&1
  echo $? >"$log.rc"
}

running=0
for target in "$@"; do
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
  run_target "$target" &
  running=$((running + 1))
done
wait

status=0
total=0
for target in "$@"; do
  log=$build/fuzz-$target.log
  rc=$(cat "$log.rc" 2>/dev/null || echo 1)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  units=$(ls "$build/corpus/$target" "$root/fuzz/corpus/$target" 2>/dev/null | wc -l)
  total=$((total + ${runs:-0}))
  if [[ $rc -ne 0 ]]; then
    status=1
    echo "fuzz: $target FAILED (exit $rc) after ${runs:-?} executions; see $log and $build/crashes/$target-*"
    grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" || true
  else
    echo "fuzz: $target: ${runs:-?} executions in ${seconds} s, $units corpus inputs, ${cov:-cov: ?}"
  fi
done
echo "fuzz: $total executions in all"
exit $status

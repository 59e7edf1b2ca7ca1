# Sourced by the bench scripts: `bench_workdir NAME` makes the scratch
# directory $work, removed at exit together with every process still listed
# in bench_pids (the scripts add the ranks and servers they start).
bench_pids=()

bench_cleanup() {
  local pid
  for pid in "${bench_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}

bench_workdir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

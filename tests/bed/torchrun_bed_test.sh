#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# torch's own launcher across the multi-host bed (scripts/bed.sh): one
# torchrun per host, two ranks each, meeting through torchrun's c10d
# rendezvous at host 0's address, as a two-node job is started on a cluster.
# Every rank joins init_process_group("rdmx") and all_reduces; ranks of one
# host reach each other over shm, ranks of the other host over tcp.
#   tests/bed/torchrun_bed_test.sh BUILD_DIR PYTHON
# PYTHON imports torch and, with PYTHONPATH, rdmx (CTest passes both).
set -euo pipefail
source "$(dirname "$0")/bed_prelude.sh" "$1"
python=${2:?the Python that imports torch}
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1
name="t$(($$ % 100000))"
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-bed.XXXXXX")
trap '"$bed" down "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

fail() {
  echo "torchrun bed test: $*" >&2
  echo "--- output of the run:" >&2
  cat "$work/run.log" >&2 || true
  exit 1
}

"$bed" up "$name" 2
port=$((30000 + $$ % 10000))
# bed.sh run starts one process per host (layout 2x1) and tells it its host
# as RDMX_RANK; that process becomes the host's torchrun. rdmx's own launch
# variables are dropped: the ranks are torchrun's, not bed.sh's.
# --local-addr: the host's name resolves nowhere, its address does.
cat >"$work/node.sh" <<'EOF'
h=$RDMX_RANK
exec env -u RDMX_RANK -u RDMX_WORLD_SIZE -u RDMX_LOCAL_RANK -u RDMX_LOCAL_WORLD_SIZE -u RDMX_STORE \
  "$PYTHON" -m torch.distributed.run --nnodes 2 --nproc-per-node 2 --node-rank "$h" \
  --rdzv-backend c10d --rdzv-endpoint "10.203.0.1:$PORT" --rdzv-id "bed-$PORT" \
  --rdzv-conf "is_host=$((h == 0 ? 1 : 0))" --local-addr "10.203.0.$((h + 1))" \
  "$SCRIPT" launched
EOF
PYTHON=$python PORT=$port SCRIPT=$src/tests/python/training.py \
  "$bed" run "$name" 2x1 --time-limit 150 --port "$((port + 1))" -- bash "$work/node.sh" \
  >"$work/run.log" 2>&1 || fail "the two torchruns failed (exit $?)"

"$python" - "$work/run.log" "$name" <<'EOF' || fail "the ranks' results are not what two hosts of two ranks give"
import json, sys
text, name = open(sys.argv[1]).read(), sys.argv[2]
decoder, found, at = json.JSONDecoder(), {}, text.find("RESULT ")
while at >= 0:
    record, end = decoder.raw_decode(text, at + len("RESULT "))
    found[record["rank"]] = record
    at = text.find("RESULT ", end)
assert sorted(found) == [0, 1, 2, 3], f"results from ranks {sorted(found)}, want 0-3"
for rank, r in sorted(found.items()):
    host = rank // 2
    assert r["world"] == 4 and r["sum"] == 10.0 and r["all_equal"], r
    assert r["host"] == f"bed-{name}-h{host}", f"rank {rank} runs on {r['host']}, want host {host}"
    assert r["env"]["GROUP_RANK"] == str(host) and r["env"]["LOCAL_RANK"] == str(rank % 2), r["env"]
    want = ["" if p == rank else "shm" if p // 2 == host else "tcp" for p in range(4)]
    assert r["providers"] == want, f"rank {rank} reaches its peers via {r['providers']}, want {want}"
print("torchrun bed test: 2 hosts x 2 ranks under torchrun's c10d rendezvous: all_reduce right, "
      "shm within hosts, tcp between")
EOF

"$bed" down "$name"
if ip netns list | grep -q "^rdmxb-$name-"; then fail "bed $name still has namespaces after down"; fi

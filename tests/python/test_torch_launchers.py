"""torch's own launcher, torchrun (python -m torch.distributed.run), starting
ranks of the "rdmx" backend on one host through its c10d rendezvous.

Two hosts under torchrun are tests/bed/torchrun_bed_test.sh; rdmx run,
mpirun and srun's variables are in test_torch_backend.py.

Run from CTest (tests/CMakeLists.txt, TorchLaunchers.*), or by hand:
    PYTHONPATH=build/python PYTHON -m pytest tests/python/test_torch_launchers.py
"""
# SPDX-License-Identifier: MIT
import os

import pytest

import ranks

# What torchrun sets itself; a value left in the test's environment must not reach the ranks.
TORCHRUN_SETS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "RDMX_TEST_RESULT_DIR")


def torchrun(world, rendezvous):
    cmd = [ranks.PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", str(world)] + rendezvous + \
        [ranks.TRAINING, "launched"]
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_SETS}
    env.setdefault("OMP_NUM_THREADS", "1")
    r = ranks.run_command(cmd, timeout_s=120, env=env)
    assert r.returncode == 0, r
    records = sorted(ranks.results_in(r.output), key=lambda x: x["rank"])
    assert [x["rank"] for x in records] == list(range(world)), r.output
    for x in records:
        assert x["world"] == world and x["sum"] == world * (world + 1) / 2 and x["all_equal"], x
        assert x["backend"] == "ProcessGroupRdmx", x
        assert x["env"]["LOCAL_RANK"] == str(x["rank"]) and x["env"]["LOCAL_WORLD_SIZE"] == str(world), x["env"]
        # One host: every peer over shared memory.
        want = ["" if p == x["rank"] else "shm" for p in range(world)]
        assert x["providers"] == want, f"rank {x['rank']} reaches its peers via {x['providers']}, want {want}"
    return records


@pytest.mark.parametrize("world", [2, 3])
def test_torchrun_c10d_rendezvous_on_one_host(world):
    port = ranks.free_port()
    records = torchrun(world, ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                               "--rdzv-id", f"rdmx-{port}"])
    assert all(x["env"]["TORCHELASTIC_RUN_ID"] == f"rdmx-{port}" for x in records), records


def test_torchrun_standalone():
    torchrun(2, ["--standalone"])
